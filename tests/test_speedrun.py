"""The speedrun experiment at the micro budget, real runs: the target is the reference
loop's final validation loss, each arm's time to target is its first evaluation at or
below it (CPU seconds summed from the metric log's train lines), the ratios are those
times over the reference's, and the sentences say what the numbers say."""

import json
import math
import os
from pathlib import Path

import pytest

from depthlab.experiments import BUDGETS, get_experiment, run_experiment
from depthlab.experiments import speedrun as sr
from depthlab.experiments.analysis import by_arm
from depthlab.experiments.report import mean, spread
from depthlab.experiments.spec import RunResult, base_config
from depthlab.metrics import read_metrics

CORPUS = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("DEPTHLAB_CACHE")
    os.environ["DEPTHLAB_CACHE"] = str(cache)
    out = tmp_path_factory.mktemp("speedrun")
    root = run_experiment("speedrun", budget="micro", out_dir=out, corpus=CORPUS,
                          progress=False, echo=False)
    yield root, json.loads((root / "export.json").read_text(encoding="utf-8"))
    if old is None:
        os.environ.pop("DEPTHLAB_CACHE")
    else:
        os.environ["DEPTHLAB_CACHE"] = old


def logs(root: Path) -> dict[str, list[list[dict]]]:
    """arm -> the metric log of each seed, in seed order, read straight from the runs."""
    export = json.loads((root / "export.json").read_text(encoding="utf-8"))
    return {arm: [read_metrics(root / "runs" / f"{arm}-s{s}") for s in v["seed"]]
            for arm, v in export["per_seed"].items()}


def first_at_or_below(log: list[dict], target: float) -> tuple[int, int, float] | None:
    """(step, tokens, CPU seconds summed over the train lines up to it), by hand."""
    for e in (r for r in log if r["kind"] == "eval"):
        if e["val_loss"] <= target:
            cpu = sum(r["cpu_s"] for r in log if r["kind"] == "train" and r["step"] <= e["step"])
            assert any(r["kind"] == "train" and r["step"] == e["step"] for r in log)
            return e["step"], e["tokens"], cpu
    return None


@pytest.mark.slow  # the micro runs: about a minute
def test_the_target_is_the_reference_loops_final_validation_loss(micro):
    root, export = micro
    ref = logs(root)[sr.REFERENCE]
    finals = [[r for r in log if r["kind"] == "eval"][-1]["val_loss"] for log in ref]
    target = sum(finals) / len(finals)
    for arm in export["per_seed"].values():
        assert arm["target"] == target
    assert f"{target:.4f} nats" in export["conclusions"][0]["en"]
    config = json.loads((root / "runs" / "reference-s0" / "config.json").read_text())
    assert config["kind"] == "reference-loop"
    # every arm is scored on the same windows: same evaluation length and token count
    specs = get_experiment("speedrun").grid(base_config(BUDGETS["micro"], CORPUS),
                                            BUDGETS["micro"], 1)
    assert len({(s.cfg.train.seq_len, s.cfg.train.eval_tokens) for s in specs}) == 1


@pytest.mark.slow  # the micro runs: about a minute
def test_time_to_target_is_the_first_evaluation_at_or_below_it(micro):
    root, export = micro
    runs = logs(root)
    ref_cpu = mean([sum(r["cpu_s"] for r in log if r["kind"] == "train")
                    for log in runs[sr.REFERENCE]])
    assert ref_cpu > 0
    for arm, seeds in runs.items():
        got = export["per_seed"][arm]
        assert got["reference_cpu_s"] == pytest.approx(ref_cpu, rel=1e-12)
        for i, log in enumerate(seeds):
            assert all(r["cpu_s"] >= 0 for r in log if r["kind"] == "train")
            want = first_at_or_below(log, got["target"])
            if want is None:
                assert got["steps_to_target"][i] is None and got["cpu_s_to_target"][i] is None
                continue
            step, tokens, cpu = want
            assert got["steps_to_target"][i] == step
            assert got["tokens_to_target"][i] == tokens
            assert got["cpu_s_to_target"][i] == pytest.approx(cpu, rel=1e-12)
            assert got["ratio_to_reference"][i] == pytest.approx(cpu / ref_cpu, rel=1e-12)


@pytest.mark.slow  # the micro runs: about a minute
def test_the_table_shows_the_logged_numbers(micro):
    _, export = micro
    rows = {row[0]: row for row in export["table"]["rows"]}
    for arm, got in export["per_seed"].items():
        label = sr.arm_words(arm, steps=sr.PLANS["micro"].ref_steps)["en"]
        row = rows[label]
        reached = [c for c in got["cpu_s_to_target"] if c is not None]
        assert row[1] == f"{len(reached)} of {len(got['seed'])}"
        if reached:  # one seed at micro: the mean is the value
            assert row[2] == f"{mean(reached):,.2f}"
            assert row[3] == f"{mean(reached) / got['reference_cpu_s']:,.2f}"
            assert row[4] == f"{mean([s for s in got['steps_to_target'] if s is not None]):,.0f}"
        assert row[7] == f"{mean(got['final_val_loss']):,.4f}"


def pays(export: dict, arm: str) -> bool:
    """The rule, from the exported numbers: every seed reaches the target and the CPU
    time is below the baseline's by more than the two spreads (one seed: any lower, in
    fewer steps to the target)."""
    cpu = export["per_seed"][arm]["cpu_s_to_target"]
    base = export["per_seed"][sr.BASELINE]["cpu_s_to_target"]
    if None in cpu:
        return False
    if None in base:
        return True
    gap = mean(cpu) - mean(base)
    if len(cpu) < 2:
        steps = export["per_seed"][arm]["steps_to_target"]
        base_steps = export["per_seed"][sr.BASELINE]["steps_to_target"]
        return gap < 0 and mean(steps) < mean(base_steps)
    return gap < 0 and abs(gap) > spread(cpu) + spread(base)


@pytest.mark.slow  # the micro runs: about a minute
def test_the_sentences_follow_the_numbers(micro):
    _, export = micro
    en = [c["en"] for c in export["conclusions"]]
    ps = export["per_seed"]
    racing = [a for a in ps if a != sr.REFERENCE]
    reached = [a for a in racing if None not in ps[a]["cpu_s_to_target"]]
    if reached:
        best = min(reached, key=lambda a: mean(ps[a]["cpu_s_to_target"]))
        ratio = mean(ps[best]["cpu_s_to_target"]) / ps[best]["reference_cpu_s"]
        fastest = next(s for s in en if s.startswith("Fastest to the target"))
        assert sr.arm_words(best)["en"] in fastest and f"{ratio:.2f}x" in fastest
        assert fastest.endswith("met.") and ("not met" in fastest) == (ratio > sr.GOAL)
    switches = [a for a in racing if a not in (sr.BASELINE, sr.BEST)]
    for arm in switches + [sr.BEST]:
        said = next(s for s in en if s.startswith(sr.arm_words(arm)["en"] + ":")
                    or s.startswith(f"The {sr.arm_words(arm)['en']} arm"))
        if None in ps[arm]["cpu_s_to_target"]:
            assert "no time to target is claimed" in said
        else:
            assert ("it pays at this scale" in said) == pays(export, arm)
            assert ("it does not pay at this scale" in said) == (not pays(export, arm))
    unpaid = [a for a in switches if not pays(export, a)]
    summary = next(s for s in en if s.startswith(("At this scale these do not pay", "Every switch")))
    if unpaid:
        listed = summary.rsplit(": ", 1)[1].rstrip(".").split(", ")
        assert sorted(listed) == sorted(sr.arm_words(a)["en"] for a in unpaid)
    else:
        assert summary.startswith("Every switch")
    # the learned values the arms log are read out per arm: x0 mixing's, nGPT's alphas
    for key, arm in (("x0_mix_x0", "x0-mix"), ("backout_lambda", "backout"),
                     ("ngpt_alpha_attn", "ngpt")):
        assert any(s.startswith(f"{key} in the {sr.arm_words(arm)['en']} arm") for s in en), key
    for c in export["conclusions"]:
        assert "{" not in c["en"] + c["zh"]


@pytest.mark.slow  # the micro runs: about a minute
def test_an_unreached_target_is_said_and_never_timed(micro):
    """The same runs against a target below every evaluation: no arm reaches it."""
    root, _ = micro
    specs = get_experiment("speedrun").grid(base_config(BUDGETS["micro"], CORPUS),
                                            BUDGETS["micro"], 1)
    results = [RunResult(s, root / "runs" / s.name, read_metrics(root / "runs" / s.name))
               for s in specs]
    arms = by_arm(results)
    lowest = min(r["val_loss"] for x in results for r in x.of("eval"))
    real = sr.race(arms)
    hits = {a: [sr.hit(x, lowest - 1.0) for x in runs] for a, runs in arms.items()}
    low = sr.Race(lowest - 1.0, real.ref_cpu, hits)
    assert all(h.step is None and h.cpu_s is None for hs in hits.values() for h in hs)
    assert not any(low.pays(a) for a in arms)
    en = [c["en"] for c in sr.conclusions(arms, low, BUDGETS["micro"])]
    assert any(s.startswith("No arm reaches the target within its 12 steps") for s in en)
    assert sum("no time to target is claimed" in s for s in en) == len(arms) - 1
    names = sorted(sr.arm_words(a)["en"] for a in arms if a not in (sr.REFERENCE, sr.BASELINE,
                                                                      sr.BEST))
    summary = next(s for s in en if s.startswith("At this scale these do not pay"))
    assert sorted(summary.rsplit(": ", 1)[1].rstrip(".").split(", ")) == names


@pytest.mark.slow  # the micro runs: about a minute
def test_running_again_trains_nothing(micro):
    root, _ = micro
    logs_before = {p: p.read_text() for p in (root / "runs").glob("*/metrics.jsonl")}
    run_experiment("speedrun", budget="micro", out_dir=root.parent, corpus=CORPUS,
                   progress=False, echo=False)
    assert {p: p.read_text() for p in (root / "runs").glob("*/metrics.jsonl")} == logs_before


def test_learned_per_layer_values_are_seed_means_per_layer():
    spec = get_experiment("speedrun").grid(base_config(BUDGETS["micro"], CORPUS),
                                           BUDGETS["micro"], 1)[1]
    a = RunResult(spec, Path("a"), [
        {"kind": "probe", "step": 10, "x0_mix_x0": [0.2, 0.1], "loss": 3.0,
         "resid_rms": [1.0, 2.0, 3.0]},  # not a learned value: ignored
        {"kind": "probe", "step": 20, "x0_mix_x0": [0.3, 0.0], "backout_lambda": 1.0,
         "unet_skip_weight": [None, 0.5]},  # logged by seed a only: dropped
        {"kind": "probe", "step": 30, "x0_mix_x0": [0.5, 0.5]}])  # only seed a: dropped
    b = RunResult(spec, Path("b"), [
        {"kind": "probe", "step": 10, "x0_mix_x0": [0.4, 0.3]},
        {"kind": "probe", "step": 20, "x0_mix_x0": [0.1, 0.2], "unet_skip_weight": [None, 0.7]}])
    got = sr.learned_series([a, b])
    assert sorted(got) == ["unet_skip_weight", "x0_mix_x0"]
    steps, layers = got["x0_mix_x0"]
    assert steps == [10, 20]
    assert layers[0] == pytest.approx([0.3, 0.2], abs=1e-15)
    assert layers[1] == pytest.approx([0.2, 0.1], abs=1e-15)
    # a layer without the value (None) has no line; the others keep their own index
    assert got["unet_skip_weight"] == ([20], {1: pytest.approx([0.6], abs=1e-15)})
    charts = sr.learned_charts({spec.arm: [a, b]})
    assert [s["label"] for s in charts[0]["series"]] == ["layer 1"]  # unet_skip_weight first
    assert [s["label"] for s in charts[1]["series"]] == ["layer 0", "layer 1"]
    sentence = sr.learned_sentences({spec.arm: [a, b]})[1]["en"]
    assert "at step 20: 0.200 / 0.100 (at the first logged step: 0.300 / 0.200)" in sentence


def test_every_learned_value_a_model_logs_is_one_the_race_draws():
    # shortcut_values (the probe lines) against LEARNED_KEYS (what the speedrun draws):
    # a model with every shortcut on, and an nGPT model.
    import torch

    from depthlab.config import apply_overrides
    from depthlab.metrics import LEARNED_KEYS
    from depthlab.model import Transformer
    from depthlab.presets import tiny
    from depthlab.train.measures import shortcut_values

    shortcuts = ("model.n_layers=4", "model.d_model=32", "model.x0_mix=true",
                 "model.backout=true", "model.value_embeds=true", "model.smear=true",
                 "model.unet_skips=true")
    ngpt = ("model.residual=ngpt", "model.norm=none", "model.final_norm=false",
            "model.ffn=swiglu")
    logged = set()
    for overrides in (shortcuts, ngpt):
        cfg = apply_overrides(tiny(), list(overrides))
        torch.manual_seed(0)
        model = Transformer(cfg.model)
        x = torch.randint(0, cfg.model.vocab_size, (2, 8))
        values = shortcut_values(model, x)
        assert values and set(values) <= set(LEARNED_KEYS), set(values) - set(LEARNED_KEYS)
        for value in values.values():
            assert sr._layers(value) is not None  # a shape the race can draw
        logged |= set(values)
    assert logged == set(LEARNED_KEYS)  # every key is logged by some model


def test_grids_per_budget():
    exp = get_experiment("speedrun")
    for name, seeds, ref_steps in (("quick", 1, 500), ("standard", 3, 2000)):
        b = BUDGETS[name]
        specs = exp.grid(base_config(b), b, b.seeds)
        ref = [s for s in specs if s.arm == sr.REFERENCE]
        assert len(ref) == seeds and all(s.trainer is sr.train_reference for s in ref)
        t, m = ref[0].cfg.train, ref[0].cfg.model
        assert (t.steps, t.batch_size, t.seq_len, t.lr, t.warmup_steps, t.beta2) == \
            (ref_steps, 12, 64, 1e-3, 100, 0.99)
        assert (m.n_layers, m.d_model, m.n_heads, m.context_len) == (4, 128, 4, 64)
        arms = [s for s in specs if s.arm != sr.REFERENCE]
        assert [s.arm for s in arms[::seeds]] == [a.name for a in sr.ARMS]
        assert all(s.trainer is None and s.cfg.train.threads == 1 for s in arms)
        assert all(s.cfg.train.eval_every % s.cfg.train.log_every == 0 for s in specs)


def test_reference_is_nanogpts_model():
    import torch

    from depthlab.experiments.reference_gpt import RefGPT

    torch.manual_seed(0)
    model = RefGPT(65, 64, 128, 4, 4)
    # nanoGPT at these settings: 0.80M parameters without the position table (795,904)
    assert sum(p.numel() for p in model.parameters()) - 64 * 128 == 795_904
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    proj = torch.cat([b.proj.weight.flatten() for b in model.blocks])  # 65,536 draws
    # std of 65,536 normal draws: relative standard error 1/sqrt(2n) = 0.28%; allow 3%
    assert proj.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.03)
    assert model.blocks[0].qkv.weight.std().item() == pytest.approx(0.02, rel=0.03)
    logits = model(torch.randint(0, 65, (2, 64)))
    assert logits.shape == (2, 64, 65)


def test_an_arm_pays_only_with_fewer_steps_and_less_cpu_time_to_the_target():
    def hits(step, cpu):
        return [sr.Hit(step, step * 10, cpu, 2 * cpu, 500, 1.8)]

    race = sr.Race(2.3, 40.0, {sr.BASELINE: hits(100, 13.0), "same-step": hits(100, 11.0),
                               "fewer-steps": hits(75, 12.0), "slower": hits(75, 14.0),
                               "never": [sr.Hit(None, None, None, 30.0, 500, 2.5)]})
    assert not race.pays("same-step")  # cheaper, but at the same step: load, not design
    assert race.pays("fewer-steps")
    assert not race.pays("slower") and not race.pays("never")
    # with seeds, fewer steps and less CPU time, each beyond the spread: an arm whose seeds
    # ran side by side at a steadier load shows a tight spread and a gap of seconds at the
    # same step count, which is still the load
    two = sr.Race(2.3, 40.0, {sr.BASELINE: hits(100, 13.0) + hits(100, 13.2),
                              "same-step": hits(100, 11.0) + hits(100, 11.1),
                              "fewer-steps": hits(75, 11.0) + hits(75, 11.2),
                              "steps-within-spread": hits(75, 11.0) + hits(100, 11.2),
                              "cpu-within-spread": hits(75, 12.0) + hits(75, 14.0)})
    assert not two.pays("same-step")
    assert two.pays("fewer-steps")
    assert not two.pays("steps-within-spread") and not two.pays("cpu-within-spread")
