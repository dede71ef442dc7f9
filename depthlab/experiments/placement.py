"""norm-placement over learning rate: at a single lr, "Post-LN without warmup is stuck"
sits on a knife edge (on other seeds it trains at 3e-3 and 4e-3 and stalls at 5e-3), so
the grid also varies lr, and the robust form of the claim is the largest lr at which
each arm (placement x warmup) still trains.
"""

from __future__ import annotations

from depthlab.experiments.baselines import Baselines, left_plateau
from depthlab.experiments.report import BLUE, GREEN, GREY, ORANGE, RED, chart, mean, series, text
from depthlab.experiments.spec import RunResult

ARMS = (("pre", "warmup", GREEN, False), ("pre", "nowarmup", GREEN, True),
        ("post", "warmup", BLUE, False), ("post", "nowarmup", RED, True))


def arm_name(placement: str, warmup: str, lr: float, high_lr: float) -> str:
    """The arms at the high lr keep their short names (pre-warmup, post-nowarmup, ...)."""
    return f"{placement}-{warmup}" + ("" if lr == high_lr else f"-lr{lr:g}")


def trains(runs: list[RunResult], base: Baselines) -> bool:
    """No seed diverged and the seed mean ends below the plateau (baselines.left_plateau)."""
    finals = [r.final_val_loss for r in runs]
    ok = all(r.end and r.end.get("status") == "completed" for r in runs)
    return ok and None not in finals and left_plateau(finals, base)


def largest_trained_lr(arms: dict[str, list[RunResult]], placement: str, warmup: str,
                       lrs: list[float], high_lr: float, base: Baselines) -> float | None:
    trained = [lr for lr in lrs if trains(arms[arm_name(placement, warmup, lr, high_lr)], base)]
    return max(trained) if trained else None


def lr_chart(arms: dict[str, list[RunResult]], lrs: list[float], high_lr: float,
             base: Baselines) -> dict:
    x = [1000 * lr for lr in lrs]
    curves = []
    for placement, warmup, color, dash in ARMS:
        values = [[r.final_val_loss for r in arms[arm_name(placement, warmup, lr, high_lr)]]
                  for lr in lrs]
        values = [[v for v in vs if v is not None] or [float("nan")] for vs in values]
        label = f"{placement.capitalize()}-Norm, {'warmup' if warmup == 'warmup' else 'no warmup'}"
        curves.append(series(label, x, [mean(v) for v in values], color, dash,
                             lo=[min(v) for v in values], hi=[max(v) for v in values]))
    curves.append(series(f"unigram baseline ({base.unigram:.4f})", x, [base.unigram] * len(x),
                         GREY, dash=True))
    curves.append(series(f"bigram baseline ({base.bigram:.4f})", x, [base.bigram] * len(x),
                         ORANGE, dash=True))
    return chart("lr", text("Final validation loss against learning rate (band: min-max over "
                            "seeds)", "最终验证损失与学习率(色带:种子间最小到最大)"),
                 text("peak learning rate (x 1e-3)", "峰值学习率(x 1e-3)"),
                 text("validation loss (nats/token)", "验证损失(nats/token)"), curves)


def largest_lr_sentence(best: dict[tuple[str, str], float | None],
                        lrs: list[float]) -> dict[str, str]:
    show = lambda lr: "none" if lr is None else f"{lr:g}"
    parts = ", ".join(f"{p.capitalize()}-Norm {'with' if w == 'warmup' else 'without'} warmup "
                      f"{show(best[(p, w)])}" for p, w, _, _ in ARMS)
    parts_zh = ",".join(f"{p.capitalize()}-Norm {'带' if w == 'warmup' else '不带'} warmup "
                        f"{show(best[(p, w)])}" for p, w, _, _ in ARMS)
    post_w, post_n = best[("post", "warmup")], best[("post", "nowarmup")]
    if len(lrs) == 1:
        verdict = ("one learning rate only: the lr grid runs at the standard budget",
                   "只有一个学习率:学习率网格在 standard 预算下运行")
    elif (post_w or 0) > (post_n or 0):
        verdict = ("warmup raises the largest learning rate at which Post-Norm trains",
                   "warmup 提高了 Post-Norm 能训练的最大学习率")
    else:
        verdict = ("warmup does not raise the largest learning rate at which Post-Norm trains "
                   "on this grid", "在这个网格上 warmup 没有提高 Post-Norm 能训练的最大学习率")
    return text(f"Largest learning rate of {', '.join(f'{lr:g}' for lr in lrs)} at which each "
                f"arm trains (all seeds finish and the mean ends below the unigram plateau): "
                f"{parts}; {verdict[0]}.",
                f"在 {', '.join(f'{lr:g}' for lr in lrs)} 中各组能训练的最大学习率(所有种子跑完且均值低于一元"
                f"平台):{parts_zh};{verdict[1]}。")
