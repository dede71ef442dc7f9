"""The lesson's experiments. Each is a grid (which switch varies) and an analysis
(which numbers answer the question). Conclusions are computed from the data:
a gap is claimed only when it exceeds the spread over seeds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from depthlab.config import Config
from depthlab.experiments.baselines import Baselines, baselines
from depthlab.experiments.mechanism import collapse_chart, collapse_sentence, input_dependence_chart
from depthlab.experiments.norm_timing import SHAPE, time_norms, timing_rows
from depthlab.experiments.placement import ARMS as PLACEMENT_ARMS
from depthlab.experiments.placement import arm_name as placement_arm
from depthlab.experiments.placement import largest_lr_sentence, largest_trained_lr, lr_chart
from depthlab.experiments.report import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    RED,
    chart,
    compare,
    fmt,
    mean,
    series,
    text,
)
from depthlab.experiments.spec import Budget, Experiment, Report, RunResult, RunSpec, seeded, variant

STEP = text("training step", "训练步数")
VAL = text("validation loss (nats/token)", "验证损失(nats/token)")
TRAIN = text("training loss (nats/token)", "训练损失(nats/token)")


def by_arm(results: list[RunResult]) -> dict[str, list[RunResult]]:
    arms: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        arms[r.spec.arm].append(r)
    return dict(arms)


def mean_curve(runs: list[RunResult], kind: str, key: str) -> tuple[list[float], list[float]]:
    """The seed-mean of a logged value over steps (steps every run logged)."""
    per_step: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        for rec in r.of(kind):
            per_step[rec["step"]].append(rec[key])
    steps = sorted(s for s, v in per_step.items() if len(v) == len(runs))
    return steps, [mean(per_step[s]) for s in steps]


def final_values(runs: list[RunResult]) -> list[float]:
    return [r.final_val_loss if r.final_val_loss is not None else math.nan for r in runs]


def diverged(runs: list[RunResult]) -> bool:
    return any(r.end and r.end.get("status") == "failed" for r in runs)


def specs_over_seeds(arms: list[tuple[str, str, Config]], seeds: int,
                     init_only: bool = False) -> list[RunSpec]:
    return [RunSpec(arm, s, seeded(cfg, s), label, init_only)
            for arm, label, cfg in arms for s in range(seeds)]


def loss_charts(arms: dict[str, list[RunResult]], style: dict[str, tuple[str, bool]],
                base: Baselines) -> list[dict]:
    """Validation and training loss over steps, seed means; the validation chart also
    draws the unigram and bigram baselines of the tokens it is scored on."""
    val, train = [], []
    for arm, runs in arms.items():
        color, dash = style.get(arm, (None, False))
        label = runs[0].spec.label
        val.append(series(label, *mean_curve(runs, "eval", "val_loss"), color, dash))
        train.append(series(label, *mean_curve(runs, "train", "loss"), color, dash))
    end = max(r.spec.cfg.train.steps for runs in arms.values() for r in runs)
    val.append(series(f"unigram baseline ({base.unigram:.4f})", [0, end],
                      [base.unigram] * 2, GREY, dash=True))
    val.append(series(f"bigram baseline ({base.bigram:.4f})", [0, end],
                      [base.bigram] * 2, ORANGE, dash=True))
    return [chart("val_loss", text("Validation loss", "验证损失"), STEP, VAL, val),
            chart("train_loss", text("Training loss", "训练损失"), STEP, TRAIN, train)]


def gap_sentence(what_en: str, what_zh: str, a: list[float], b: list[float],
                 a_name: tuple[str, str], b_name: tuple[str, str]) -> dict[str, str]:
    gap, real, note = compare(a, b)
    if not math.isfinite(gap):
        return text(f"{what_en}: {b_name[0]} diverged (non-finite loss); {a_name[0]} ended at "
                    f"{fmt(a)}.", f"{what_zh}:{b_name[1]}发散(损失非有限);{a_name[1]}结束于 {fmt(a)}。")
    if not real:
        return text(f"{what_en}: {b_name[0]} and {a_name[0]} end within the seed spread "
                    f"({fmt(b)} vs {fmt(a)}; {note}): no difference is claimed.",
                    f"{what_zh}:{b_name[1]}与{a_name[1]}的差距没有超出种子间波动"
                    f"({fmt(b)} 对 {fmt(a)}),不下结论。")
    word, word_zh = ("higher", "高") if gap > 0 else ("lower", "低")
    return text(f"{what_en}: {b_name[0]} ends {abs(gap):.4f} nats {word} than {a_name[0]} "
                f"({fmt(b)} vs {fmt(a)}; {note}).",
                f"{what_zh}:{b_name[1]}最终比{a_name[1]}{word_zh} {abs(gap):.4f} nats"
                f"({fmt(b)} 对 {fmt(a)})。")


# --- residual (depthlab/experiments/residual.py) ---------------------------------

def residual_grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    from depthlab.experiments import residual

    return residual.grid(base, b, seeds)


def residual_analyze(results: list[RunResult], b: Budget) -> Report:
    from depthlab.experiments import residual

    return residual.analyze(results, b)


# --- init-gradients ----------------------------------------------------------------

def init_gradients_grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    """The course model with and without residual, and Pre vs Post-Norm at the plain 0.02
    init of Xiong et al. 2020 (the 0.02/sqrt(2L) rule would itself shrink the difference)."""
    deep = variant(base, f"model.n_layers={b.deep}")
    plain_init = variant(deep, "model.scaled_init=false")
    arms = [
        ("pre-residual", "Pre-Norm, residual", deep),
        ("pre-none", "Pre-Norm, no residual", variant(deep, "model.residual=none")),
        ("pre-residual-init0.02", "Pre-Norm, residual, init 0.02", plain_init),
        ("post-residual-init0.02", "Post-Norm, residual, init 0.02",
         variant(plain_init, "model.placement=post")),
    ]
    return specs_over_seeds(arms, max(seeds, 3), init_only=True)


def _block_grads(runs: list[RunResult]) -> list[list[float]]:
    return [r.of("probe")[0]["grad_params"] for r in runs]


def init_gradients_analyze(results: list[RunResult], b: Budget) -> Report:
    arms = by_arm(results)
    colors = {"pre-residual": GREEN, "pre-none": RED, "pre-residual-init0.02": ORANGE,
              "post-residual-init0.02": BLUE}
    curves, ratios = [], {}
    report = Report()
    report.table["columns"] = ["arm", "first block", "last block", "last / first"]
    for arm, runs in arms.items():
        grads = _block_grads(runs)
        per_block = [mean([g[i] for g in grads]) for i in range(len(grads[0]))]
        curves.append(series(runs[0].spec.label, list(range(1, len(per_block) + 1)), per_block,
                             colors.get(arm)))
        ratios[arm] = [g[-1] / g[0] if g[0] > 0 else math.inf for g in grads]
        report.table["rows"].append([runs[0].spec.label, f"{per_block[0]:.3g}",
                                     f"{per_block[-1]:.3g}", fmt(ratios[arm])])
    report.charts.append(chart(
        "block_grads", text(f"Gradient each block receives at initialisation ({b.deep} layers, "
                            f"{len(arms['pre-residual'])} seeds)",
                            f"初始化时每一块收到的梯度({b.deep} 层,{len(arms['pre-residual'])} 个种子)"),
        text("block (1 = bottom)", "块(1 = 最底层)"),
        text("gradient norm of the block's parameters", "该块参数的梯度范数"), curves, y_log=True))
    post, pre = mean(ratios["post-residual-init0.02"]), mean(ratios["pre-residual-init0.02"])
    factor = post / pre
    if factor >= 1.5:
        report.conclusions.append(text(
            f"Post-Norm's last/first block gradient ratio is {factor:.2f}x Pre-Norm's "
            f"({post:.3f} vs {pre:.3f}, both at init 0.02): relative to the bottom, Post-LN "
            "gives the top blocks more gradient (Xiong et al. 2020).",
            f"Post-Norm 的末块/首块梯度比是 Pre-Norm 的 {factor:.2f} 倍({post:.3f} 对 {pre:.3f}):"
            "相对底层,Post-LN 给顶层的梯度更大(Xiong 等 2020)。"))
    else:
        report.conclusions.append(text(
            f"Post-Norm's last/first ratio is only {factor:.2f}x Pre-Norm's ({post:.3f} vs "
            f"{pre:.3f}); the effect of Xiong et al. 2020 does not show clearly here.",
            f"Post-Norm 的末块/首块梯度比只是 Pre-Norm 的 {factor:.2f} 倍,Xiong 等 2020 的效应这里不明显。"))
    report.conclusions.append(xiong_profile(post, pre))
    none, pre = mean(ratios["pre-none"]), mean(ratios["pre-residual"])
    report.conclusions.append(text(
        f"Without the residual, the last/first ratio is {none:.3g} (with it: {pre:.3g}): "
        f"{'the bottom block gets far more gradient than the top' if none < pre else 'the bottom gets less'}"
        " — every layer's Jacobian multiplies in, so the gradient is rescaled layer by layer "
        "instead of passing a direct path.",
        f"去掉残差时末块/首块比为 {none:.3g}(有残差 {pre:.3g}):"
        "每层的雅可比连乘,梯度逐层被缩放,而不是走直通路。"))
    return report


def _profile(ratio: float) -> tuple[str, str]:
    """How a last/first block gradient ratio reads: a factor 1.5 either way is a slope."""
    if ratio > 1.5:
        return "grows toward the output", "向输出端增大"
    if ratio < 1 / 1.5:
        return "falls toward the output", "向输出端减小"
    return "is flat", "基本持平"


def xiong_profile(post: float, pre: float) -> dict[str, str]:
    """Where the measured profiles agree with Xiong et al. 2020 (Post-LN's gradient grows
    toward the output, Pre-LN's stays flat) and where they do not."""
    (p_en, p_zh), (q_en, q_zh) = _profile(post), _profile(pre)
    agree = [name for name, got, want in (("Post-LN", p_en, "grows toward the output"),
                                          ("Pre-LN", q_en, "is flat")) if got == want]
    differ = [n for n in ("Post-LN", "Pre-LN") if n not in agree]
    verdict = ("both agree" if not differ else
               f"{' and '.join(agree) + ' agrees; ' if agree else ''}"
               f"{' and '.join(differ)} {'differs' if len(differ) == 1 else 'differ'}")
    return text(
        f"Against Xiong et al. 2020 (Post-LN's gradient grows toward the output, Pre-LN's "
        f"stays flat): here Post-LN's {p_en} (last/first {post:.2f}) and Pre-LN's {q_en} "
        f"({pre:.2f}); {verdict} (a slope is a factor 1.5 from first to last block).",
        f"与 Xiong 等 2020(Post-LN 的梯度向输出端增大,Pre-LN 持平)对照:这里 Post-LN {p_zh}"
        f"(末块/首块 {post:.2f}),Pre-LN {q_zh}({pre:.2f})。")


# --- stream-rms --------------------------------------------------------------------

def stream_rms_grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    arms_init = []
    for depth in (b.deep, b.deepest):
        for scaled in (True, False):
            rule = "0.02/sqrt(2L)" if scaled else "0.02"
            arms_init.append((f"init-L{depth}-{'scaled' if scaled else 'plain'}",
                              f"{depth} layers, init {rule}",
                              variant(base, f"model.n_layers={depth}",
                                      f"model.scaled_init={str(scaled).lower()}")))
    trained = [("trained", f"{b.shallow} layers, residual (trained)",
                variant(base, f"model.n_layers={b.shallow}"))]
    return specs_over_seeds(arms_init, 1, init_only=True) + specs_over_seeds(trained, 1)


def stream_rms_analyze(results: list[RunResult], b: Budget) -> Report:
    arms = by_arm(results)
    report = Report()
    trained = arms["trained"][0].of("probe")
    first, last = trained[0], trained[-1]
    writes = list(range(len(first["resid_rms"])))
    rel = lambda rec: [v / rec["resid_rms"][0] for v in rec["resid_rms"]]
    report.charts.append(chart(
        "writes", text(f"Residual-stream RMS after each write ({b.shallow} layers, relative to "
                       "the embedding)", f"每次写入后的残差流 RMS({b.shallow} 层,相对嵌入)"),
        text("writes into the stream (k)", "写入次数 k"),
        text("RMS / RMS of the embedding", "RMS / 嵌入的 RMS"),
        [series("at initialisation", writes, rel(first), BLUE),
         series(f"after training (step {last['step']})", writes, rel(last), ORANGE),
         series("sqrt(1 + k): independent unit writes", writes,
                [math.sqrt(1 + k) for k in writes], GREY, dash=True)]))
    depth_curves, finals = [], {}
    colors = {"scaled": GREEN, "plain": RED}
    for depth in (b.deep, b.deepest):
        for rule in ("scaled", "plain"):
            rec = arms[f"init-L{depth}-{rule}"][0].of("probe")[0]
            finals[(depth, rule)] = rec["resid_rms"][-1]
            depth_curves.append(series(arms[f"init-L{depth}-{rule}"][0].spec.label,
                                       list(range(len(rec["resid_rms"]))), rec["resid_rms"],
                                       colors[rule], dash=depth == b.deepest))
    report.charts.append(chart(
        "init_depth", text("Stream RMS at initialisation: scaled vs plain init",
                           "初始化时的残差流 RMS:按深度缩放 vs 不缩放"),
        text("writes into the stream (k)", "写入次数 k"), text("RMS of the residual stream", "残差流 RMS"),
        depth_curves, y_log=True))
    report.table["columns"] = ["init", f"final RMS, {b.deep} layers", f"final RMS, {b.deepest} layers",
                               "ratio"]
    for rule, name in (("scaled", "0.02/sqrt(2L)"), ("plain", "0.02")):
        lo, hi = finals[(b.deep, rule)], finals[(b.deepest, rule)]
        report.table["rows"].append([name, f"{lo:.4f}", f"{hi:.4f}", f"{hi / lo:.3f}"])
    r_scaled = finals[(b.deepest, "scaled")] / finals[(b.deep, "scaled")]
    r_plain = finals[(b.deepest, "plain")] / finals[(b.deep, "plain")]
    grows = all(a <= c for a, c in zip(first["resid_rms"][1:], first["resid_rms"][2:], strict=False))
    report.conclusions.append(text(
        f"With the 0.02/sqrt(2L) init the final RMS changes by a factor {r_scaled:.3f} from "
        f"{b.deep} to {b.deepest} layers "
        f"({'within' if abs(r_scaled - 1) <= 0.15 else 'not within'} 15%); with plain 0.02 it "
        f"changes by {r_plain:.3f}.",
        f"用 0.02/sqrt(2L) 初始化时,最终 RMS 从 {b.deep} 层到 {b.deepest} 层变化 {r_scaled:.3f} 倍;"
        f"用 0.02 时变化 {r_plain:.3f} 倍。"))
    report.conclusions.append(text(
        f"At initialisation the RMS {'never decreases' if grows else 'does not always grow'} "
        f"from one write to the next ({first['resid_rms'][0]:.4f} -> {first['resid_rms'][-1]:.4f}); "
        f"after training it ends at {last['resid_rms'][-1]:.4f}, "
        f"{last['resid_rms'][-1] / last['resid_rms'][0]:.2f}x the embedding's RMS.",
        f"初始化时 RMS {'逐次写入不减' if grows else '并非逐次增长'}"
        f"({first['resid_rms'][0]:.4f} -> {first['resid_rms'][-1]:.4f});训练后最终为 "
        f"{last['resid_rms'][-1]:.4f},是嵌入 RMS 的 {last['resid_rms'][-1] / last['resid_rms'][0]:.2f} 倍。"))
    return report


# --- norm-placement ----------------------------------------------------------------

# A learning rate where the difference shows, from scans of 6-layer course models
# (batch 16 x 64 characters, plain 0.02 init, warmup a third of the run, seed 1337):
#   300 steps at 5e-3: Post-LN with warmup 2.03 nats, without warmup stalled at 3.30;
#   300 steps at 3e-3: both Post-LN runs train (2.03 / 2.00): no difference to show;
#   500 steps at 1e-2: Post-LN stalls at 3.27 with and without warmup, Pre-LN trains.
HIGH_LR = 5e-3


def norm_placement_grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    """Xiong et al. 2020's setting: plain 0.02 init (as in the 2017 Transformer), half the
    deep stack, a high learning rate; the arms differ in placement and warmup only."""
    warm = max(1, b.steps // 3)
    common = variant(base, f"model.n_layers={max(2, b.deep // 2)}", "model.scaled_init=false")
    arms = []
    for lr in b.lrs:
        for placement in ("pre", "post"):
            for warmup in (warm, 0):
                tag = "warmup" if warmup else "nowarmup"
                arms.append((placement_arm(placement, tag, lr, HIGH_LR),
                             f"{placement.capitalize()}-Norm, {'warmup' if warmup else 'no warmup'}"
                             + ("" if lr == HIGH_LR else f", lr {lr:g}"),
                             variant(common, f"model.placement={placement}",
                                     f"train.warmup_steps={warmup}", f"train.lr={lr}")))
    return specs_over_seeds(arms, seeds)


def norm_placement_analyze(results: list[RunResult], b: Budget) -> Report:
    every = by_arm(results)
    arms = {a: runs for a, runs in every.items() if runs[0].spec.cfg.train.lr == HIGH_LR}
    lrs = sorted({r.spec.cfg.train.lr for r in results})
    style = {"pre-warmup": (GREEN, False), "pre-nowarmup": (GREEN, True),
             "post-warmup": (BLUE, False), "post-nowarmup": (RED, True)}
    base = baselines(results[0].spec.cfg)
    report = Report(charts=loss_charts(arms, style, base), baselines=base.to_json())
    if len(lrs) > 1:
        report.charts.insert(0, lr_chart(every, lrs, HIGH_LR, base))
    collapsed = arms["post-nowarmup"][0]
    report.charts.append(collapse_chart("collapse", collapsed, "Post-Norm without warmup",
                                        "不带 warmup 的 Post-Norm"))
    report.charts.append(input_dependence_chart("input_dependence", [
        (arms[arm][0].spec.label, arms[arm][0], *style[arm]) for arm in style]))
    best = {(p, w): largest_trained_lr(every, p, w, lrs, HIGH_LR, base)
            for p, w, _, _ in PLACEMENT_ARMS}
    report.table["columns"] = ["arm", f"final val loss at lr {HIGH_LR:g}", "diverged",
                               f"largest lr that trains (of {', '.join(f'{lr:g}' for lr in lrs)})"]
    for p, w, _, _ in PLACEMENT_ARMS:
        runs = arms[f"{p}-{w}"]
        report.table["rows"].append([runs[0].spec.label, fmt(final_values(runs)),
                                     "yes" if diverged(runs) else "no",
                                     "none" if best[(p, w)] is None else f"{best[(p, w)]:g}"])
    report.conclusions.append(largest_lr_sentence(best, lrs))
    v = {arm: final_values(runs) for arm, runs in arms.items()}
    report.conclusions.append(gap_sentence(
        "Post-Norm", "Post-Norm", v["post-warmup"], v["post-nowarmup"],
        ("Post-Norm with warmup", "带 warmup 的 Post-Norm"),
        ("Post-Norm without warmup", "不带 warmup 的 Post-Norm")))
    report.conclusions.append(gap_sentence(
        "Without warmup", "不带 warmup", v["pre-nowarmup"], v["post-nowarmup"],
        ("Pre-Norm", "Pre-Norm"), ("Post-Norm", "Post-Norm")))
    report.conclusions.append(collapse_sentence(
        collapsed, b.eval_every, f"Post-Norm without warmup (seed {collapsed.spec.seed})",
        f"不带 warmup 的 Post-Norm(种子 {collapsed.spec.seed})"))
    return report


# --- norm-type ---------------------------------------------------------------------

NORM_COLORS = {"layernorm": BLUE, "rmsnorm": GREEN, "rmsnorm_zero_centered": PURPLE}


def norm_type_grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    arms = [(norm, norm, variant(base, f"model.norm={norm}")) for norm in NORM_COLORS]
    return specs_over_seeds(arms, seeds)


def norm_type_analyze(results: list[RunResult], b: Budget) -> Report:
    arms = by_arm(results)
    base = baselines(results[0].spec.cfg)
    report = Report(charts=loss_charts(arms, {k: (c, False) for k, c in NORM_COLORS.items()},
                                       base), baselines=base.to_json())
    timing = time_norms(rounds=b.timing_rounds, calls=2 if b.name == "micro" else 20)
    report.table["columns"] = ["norm", "final val loss",
                               f"ms per norm call, fwd+bwd on {'x'.join(map(str, SHAPE))}",
                               "ms per 1-block model step, fwd+bwd"]
    v = {}
    for (arm, runs), row in zip(arms.items(), timing_rows(timing), strict=True):
        v[arm] = final_values(runs)
        report.table["rows"].append([arm, fmt(v[arm]), *row[1:]])
    report.conclusions.append(gap_sentence("RMSNorm vs LayerNorm", "RMSNorm 对 LayerNorm",
                                           v["layernorm"], v["rmsnorm"],
                                           ("LayerNorm", "LayerNorm"), ("RMSNorm", "RMSNorm")))
    report.conclusions.append(gap_sentence(
        "Zero-centred vs plain RMSNorm", "零中心 RMSNorm 对普通 RMSNorm", v["rmsnorm"],
        v["rmsnorm_zero_centered"], ("RMSNorm", "RMSNorm"), ("zero-centred RMSNorm", "零中心 RMSNorm")))
    n_ln, n_rms = (timing["norm"][k]["thread_median_ms"] for k in ("layernorm", "rmsnorm"))
    b_ln, b_rms = (timing["block"][k]["thread_median_ms"] for k in ("layernorm", "rmsnorm"))
    report.conclusions.append(text(
        f"Time (a benchmark, not the training runs: interleaved in {b.timing_rounds} rounds in "
        f"one process on one thread, thread time, median): one norm call forward + backward "
        f"on {'x'.join(map(str, SHAPE))} takes {n_ln:.3f} ms with LayerNorm and {n_rms:.3f} ms "
        f"with RMSNorm ({n_ln / n_rms:.2f}x); a one-block course model step {b_ln:.2f} vs "
        f"{b_rms:.2f} ms ({b_ln / b_rms:.2f}x), of which its 3 LayerNorm calls are "
        f"{300 * n_ln / b_ln:.0f}%.",
        f"用时(基准测试,不取自训练:单进程单线程交错 {b.timing_rounds} 轮,线程时间中位数):"
        f"在 {'x'.join(map(str, SHAPE))} 上一次归一化前向+反向,LayerNorm {n_ln:.3f} ms,RMSNorm "
        f"{n_rms:.3f} ms({n_ln / n_rms:.2f} 倍);单块课程模型一步 {b_ln:.2f} 对 {b_rms:.2f} ms"
        f"({b_ln / b_rms:.2f} 倍),其中 3 次 LayerNorm 调用占 {300 * n_ln / b_ln:.0f}%。"))
    return report


# --- attn-gate ---------------------------------------------------------------------

def attn_gate_grid(base: Config, b: Budget, seeds: int) -> list[RunSpec]:
    arms = [("no-gate", "no gate", base),
            ("gate", "sigmoid output gate", variant(base, "model.attn_gate=true"))]
    return specs_over_seeds(arms, seeds)


def first_token_share(run_dir: Path) -> tuple[float, float]:
    """Mean attention weight each query puts on token 0 (all layers and heads) on a
    fixed validation batch, and the uniform causal baseline mean_n 1/n = H_T / T."""
    import torch

    from depthlab.rundir import load_model
    from depthlab.tokenizer import prepare_data
    from depthlab.train import batches

    model, cfg = load_model(run_dir)
    data = prepare_data(cfg.data)
    x, _ = batches.fixed_batch(data.val, 8, cfg.train.seq_len, torch.device("cpu"))
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=lambda n: n.endswith("hook_pattern"))
    shares = torch.stack([cache[n][..., 0] for n in cache.keys()])  # [L, B, H, T]
    T = x.shape[1]
    baseline = sum(1 / n for n in range(1, T + 1)) / T
    return shares.mean().item(), baseline


def attn_gate_analyze(results: list[RunResult], b: Budget) -> Report:
    arms = by_arm(results)
    base = baselines(results[0].spec.cfg)
    report = Report(charts=loss_charts(arms, {"no-gate": (BLUE, False), "gate": (GREEN, False)},
                                       base), baselines=base.to_json())
    report.table["columns"] = ["arm", "final val loss", "attention on first token", "uniform baseline H_T/T"]
    shares: dict[str, list[float]] = {}
    baseline = math.nan
    for arm, runs in arms.items():
        shares[arm] = []
        for r in runs:
            share, baseline = first_token_share(r.run_dir)
            shares[arm].append(share)
        report.table["rows"].append([runs[0].spec.label, fmt(final_values(runs)),
                                     f"{100 * mean(shares[arm]):.1f}%", f"{100 * baseline:.1f}%"])
    v = {arm: final_values(runs) for arm, runs in arms.items()}
    report.conclusions.append(gap_sentence("Validation loss", "验证损失", v["no-gate"], v["gate"],
                                           ("the ungated model", "无门控模型"),
                                           ("the gated model", "带门控模型")))
    s_no, s_gate = mean(shares["no-gate"]), mean(shares["gate"])
    sink = s_no > 2 * baseline
    report.conclusions.append(text(
        f"Share of attention on the first token: {100 * s_no:.1f}% without the gate, "
        f"{100 * s_gate:.1f}% with it, against {100 * baseline:.1f}% for uniform causal attention. "
        + ("An attention sink has formed without the gate." if sink else
           "No attention sink has formed at this scale (the ungated share is "
           f"{'below' if s_no < baseline else 'under twice'} the uniform baseline), so this run "
           "cannot show the gate removing one."),
        f"首 token 的注意力占比:无门控 {100 * s_no:.1f}%,有门控 {100 * s_gate:.1f}%,均匀因果注意力为 "
        f"{100 * baseline:.1f}%。" + ("无门控时已出现注意力汇聚。" if sink else
                                      "这个规模下没有形成注意力汇聚(无门控的占比"
                                      f"{'低于' if s_no < baseline else '不到两倍'}均匀基线),"
                                      "所以这次运行无法展示门控消除它。")))
    return report


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in [
    Experiment("residual", "What does removing the residual do to the course model, from 1 to 12 "
               "layers?", "去掉残差,课程模型从 1 层到 12 层各会怎样?",
               ("model.residual", "model.n_layers"),
               residual_grid, residual_analyze),
    Experiment("init-gradients", "How much gradient does each block receive at initialisation?",
               "初始化时每一块收到多大的梯度?", ("model.residual", "model.placement", "model.scaled_init"),
               init_gradients_grid, init_gradients_analyze),
    Experiment("stream-rms", "How does the residual stream's RMS grow with each write?",
               "残差流的 RMS 随每次写入怎样增长?", ("model.n_layers", "model.scaled_init"),
               stream_rms_grid, stream_rms_analyze),
    Experiment("norm-placement", "Does Post-Norm need learning-rate warmup where Pre-Norm does not?",
               "Post-Norm 是否离不开学习率 warmup,而 Pre-Norm 不需要?",
               ("model.placement", "train.warmup_steps", "train.lr"), norm_placement_grid,
               norm_placement_analyze),
    Experiment("norm-type", "LayerNorm, RMSNorm or zero-centred RMSNorm: loss and time per step?",
               "LayerNorm、RMSNorm、零中心 RMSNorm:损失与每步用时?", ("model.norm",),
               norm_type_grid, norm_type_analyze),
    Experiment("attn-gate", "Does a sigmoid gate on the attention output change the loss and the "
               "attention on the first token?", "注意力输出加 sigmoid 门,损失和首 token 注意力会变吗?",
               ("model.attn_gate",), attn_gate_grid, attn_gate_analyze),
]}


from depthlab.experiments.frontier import EXPERIMENT as FRONTIER  # noqa: E402  (it imports this module)

EXPERIMENTS[FRONTIER.name] = FRONTIER
