"""residual-frontier: its grid per budget, the arithmetic of the quick budget, the
analysis on synthetic metric logs (claims only beyond the seed spread, in both
languages), the reader of learned mixing matrices / depth weights on a fake model, and
one micro run through the real runner with the arms that every build has."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from depthlab.config import diff
from depthlab.errors import UserError
from depthlab.experiments import BUDGETS, EXPERIMENTS, run_experiment
from depthlab.experiments import frontier as f
from depthlab.experiments.baselines import Baselines
from depthlab.experiments.frontier_learned import (
    PAGE_DATA_FILE,
    composite_gain,
    read_learned,
)
from depthlab.experiments.placement import HIGH_LR
from depthlab.experiments.report import validate_export
from depthlab.experiments.spec import RunResult, RunSpec, base_config
from depthlab.hooks import HookedModule, HookPoint

CORPUS = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")
ON_MAIN = ("plain", "scaled", "rezero", "post-ln")  # arms whose switches every build has
DESIGNS = {"plain", "scaled", "deepnorm", "rezero", "lns", "dyt", "value-residual", "hc", "mhc",
           "attnres"}


# --- the grid ----------------------------------------------------------------------

def test_every_design_and_the_failing_reference_are_arms():
    assert set(f.ARM_NAMES) == DESIGNS | {"post-ln"}
    by = f.ARM_BY_NAME
    assert "model.streams=4" in by["hc"].overrides and "model.streams=4" in by["mhc"].overrides
    # the C8 pair differs only in the residual switch, and trains without warmup
    assert set(by["deepnorm"].overrides) - set(by["post-ln"].overrides) == {
        "model.residual=deepnorm"}
    assert not by["deepnorm"].warmup and not by["post-ln"].warmup
    assert all(a.warmup for a in f.ARMS if a.name not in f.C8_PAIR)


def test_standard_runs_every_arm_at_12_and_48_layers_with_three_seeds():
    b = BUDGETS["standard"]
    p = f.plan(b)
    assert [(d, set(names), steps) for d, names, steps in p.depths] == [
        (12, set(f.ARM_NAMES), b.steps), (48, set(f.ARM_NAMES), b.steps)]
    assert b.seeds >= 3
    specs = f.grid(base_config(b, CORPUS), b, b.seeds, only=ON_MAIN)
    assert len(specs) == 2 * len(ON_MAIN) * b.seeds
    assert {(s.cfg.model.n_layers, f.split_arm(s.arm)[1]) for s in specs} == {
        (d, a) for d in (12, 48) for a in ON_MAIN}


def test_quick_runs_the_designs_at_12_layers_and_only_the_c8_pair_at_48():
    b = BUDGETS["quick"]
    depths = {d: (set(names), steps) for d, names, steps in f.plan(b).depths}
    assert depths == {12: (set(f.ARM_NAMES) - set(f.C8_PAIR), f.QUICK_STEPS),
                      48: (set(f.C8_PAIR), f.QUICK_STEPS)}
    specs = f.grid(base_config(b, CORPUS), b, b.seeds, only=ON_MAIN)
    assert sorted(s.arm for s in specs) == ["L12-plain", "L12-rezero", "L12-scaled", "L48-post-ln"]


def test_arms_differ_only_in_their_switches():
    b = BUDGETS["quick"]
    specs = f.grid(base_config(b, CORPUS), b, 2, only=ON_MAIN)
    allowed = set(f.EXPERIMENT.switches) | {"train.seed"}
    assert all(set(diff(specs[0].cfg, s.cfg)) <= allowed for s in specs)
    cfg = {s.arm: s.cfg for s in specs if s.seed == 0}
    post, plain = cfg[f.arm_name(b.deepest, "post-ln")], cfg[f.arm_name(b.deep, "plain")]
    assert post.model.placement == "post" and post.train.warmup_steps == 0
    assert post.train.lr == HIGH_LR and not post.model.scaled_init
    assert plain.train.warmup_steps == f.QUICK_STEPS // 10 and plain.model.placement == "pre"
    assert cfg[f.arm_name(b.deep, "scaled")].model.residual == "scaled"


def test_an_unknown_or_unavailable_arm_is_a_one_line_error():
    b = BUDGETS["micro"]
    with pytest.raises(UserError, match="unknown residual-frontier arm.*nope"):
        f.grid(base_config(b, CORPUS), b, 1, only=("plain", "nope"))
    missing = f.Arm("future", "future", ("model.residual=future",), "#000000")
    with pytest.raises(UserError, match="arm 'future'.*model.residual=future") as e:
        f.arm_config(base_config(b, CORPUS), missing, 3, 4)
    assert "\n" not in str(e.value)


def test_quick_budget_arithmetic_stays_under_fifteen_minutes_of_one_core():
    # Tests never time: the cost is layers x steps at LAYER_STEP_S (measured, see the module).
    one = f.Plan(((10, ("plain",), 100),), timing_rounds=0, timing_calls=0)
    assert f.estimated_seconds(one, 1) == pytest.approx(f.LAYER_STEP_S * (1000 + 10))
    streams = f.Plan(((10, ("hc",), 100),), timing_rounds=0, timing_calls=0)
    assert f.estimated_seconds(streams, 1) == pytest.approx(f.STREAM_COST * f.estimated_seconds(one, 1))
    quick = BUDGETS["quick"]
    assert f.estimated_seconds(f.plan(quick), quick.seeds) <= f.QUICK_LIMIT_S
    # and what quick drops is what makes it fit: the full grid at one seed would not
    full = f.Plan(((12, f.ARM_NAMES, f.QUICK_STEPS), (48, f.ARM_NAMES, f.QUICK_STEPS)), 5, 2)
    assert f.estimated_seconds(full, 1) > f.QUICK_LIMIT_S


# --- the analysis on synthetic logs ------------------------------------------------

BASE = Baselines(unigram=3.30, bigram=2.50, tokens=1024, windows=16, val_tokens=10_000)


def run(arm: str, depth: int, seed: int, final: float, *, failed: bool = False) -> RunResult:
    b = BUDGETS["micro"]
    cfg = f.arm_config(base_config(b, CORPUS), f.ARM_BY_NAME["plain"], depth, 4)
    records = [
        {"kind": "train", "step": 1, "loss": 4.0}, {"kind": "train", "step": 4, "loss": final},
        {"kind": "eval", "step": 2, "val_loss": 3.5}, {"kind": "eval", "step": 4, "val_loss": final},
        {"kind": "probe", "step": 0, "resid_rms": [1.0] * (2 * depth + 1),
         "grad_params": [0.5 + i for i in range(depth)]},
        {"kind": "probe", "step": 4, "resid_rms": [1.0 + k for k in range(2 * depth + 1)],
         "grad_params": [2.0] * depth},
        {"kind": "run_end", "step": 4, "status": "failed" if failed else "completed",
         "diverged": failed},
    ]
    spec = RunSpec(f.arm_name(depth, arm), seed, cfg, f"{arm}, {depth} layers")
    return RunResult(spec, Path("/nonexistent") / "runs" / spec.name, records)


def results(finals: dict[tuple[str, int], list[float]]) -> list[RunResult]:
    return [run(arm, depth, s, v) for (arm, depth), vs in finals.items() for s, v in enumerate(vs)]


TIMING = {"depth": 3, "rounds": 2, "calls": 1, "shape": "4x16",
          "arms": {"plain": {"thread_median_ms": 10.0, "vs_plain": 1.0},
                   "hc": {"thread_median_ms": 12.5, "vs_plain": 1.25}}}


def conclusions(report) -> list[dict[str, str]]:
    assert all(set(c) == {"en", "zh"} and c["en"] and c["zh"] for c in report.conclusions)
    return report.conclusions


def test_a_difference_is_claimed_only_beyond_the_seed_spread_in_both_languages():
    finals = {("plain", 3): [2.00, 2.02, 2.04], ("hc", 3): [1.80, 1.81, 1.82],
              ("rezero", 3): [2.01, 2.05, 2.03], ("scaled", 3): [2.30, 2.31, 2.32]}
    report, _ = f.build_report(results(finals), BASE, TIMING, {}, "standard")
    sentence = next(c for c in conclusions(report) if c["en"].startswith("At 3 layers (3 seeds)"))
    lower, rest = sentence["en"].split("Lower: ")[1].split(" Higher: ")
    higher, within = rest.split(" Within the spread, no difference claimed: ")
    assert "hc 1.8100 ± 0.0100 (-0.2100)" in lower and "rezero" not in lower
    assert "scaled 2.3100 ± 0.0100 (+0.2900)" in higher
    assert "rezero 2.0300 ± 0.0200 (+0.0100)" in within
    assert "hc 1.8100 ± 0.0100 (-0.2100)" in sentence["zh"].split("更低：")[1].split("。")[0]
    rows = {(r[0], r[1]): r for r in report.table["rows"]}
    assert rows[(3, "rezero")][3] == "+0.0100 (within spread)"
    assert rows[(3, "hc")][3] == "-0.2100"


def test_one_seed_claims_nothing():
    finals = {("plain", 3): [2.0], ("hc", 3): [1.5]}
    report, _ = f.build_report(results(finals), BASE, {}, {}, "quick")
    sentence = next(c for c in conclusions(report) if c["en"].startswith("At 3 layers"))
    assert "no difference is claimed" in sentence["en"] and "hc 1.5000 (-0.5000)" in sentence["en"]
    assert "不下任何差异结论" in sentence["zh"]
    assert "Lower" not in sentence["en"]


@pytest.mark.parametrize(("deepnorm", "post", "key"), [
    ([2.1, 2.2, 2.15], [3.30, 3.31, 3.29], "holds"),
    ([2.1, 2.2, 2.15], [2.3, 2.4, 2.35], "does not show"),
    ([3.30, 3.31, 3.29], [3.30, 3.31, 3.29], "DeepNorm does not train"),
])
def test_the_c8_point_is_said_as_it_came_out(deepnorm, post, key):
    finals = {("plain", 6): [2.0, 2.0, 2.0], ("deepnorm", 6): deepnorm, ("post-ln", 6): post}
    report, _ = f.build_report(results(finals), BASE, {}, {}, "standard")
    c8 = [c for c in conclusions(report) if "without warmup" in c["en"]]
    assert len(c8) == 1 and key in c8[0]["en"] and "warmup" in c8[0]["zh"]
    assert "Post-LN" in c8[0]["zh"]
    if key == "holds":
        assert "does not get below the unigram plateau" in c8[0]["en"]
        assert "没有降到一元平台以下" in c8[0]["zh"]
    # the C8 pair trains with another lr and no warmup: never compared with plain
    assert not any("deepnorm" in c["en"] for c in report.conclusions if c["en"].startswith("At 6"))


def test_a_diverged_post_ln_is_a_failure_not_a_loss():
    rs = results({("plain", 6): [2.0], ("deepnorm", 6): [2.1]})
    rs.append(run("post-ln", 6, 0, float("nan"), failed=True))
    report, data = f.build_report(rs, BASE, {}, {}, "quick")
    assert any("it diverges" in c["en"] for c in conclusions(report))
    assert data["arms"]["L6-post-ln"]["mean"] is None


def test_page_data_carries_curves_finals_rms_and_gradients():
    finals = {("plain", 3): [2.0, 2.1], ("hc", 3): [1.9, 1.95], ("hc", 6): [1.8, 1.9]}
    learned = {"L3-hc": {"seed": 0, "mixing": [{"name": "blocks.0", "matrix": [[1.0]]}],
                         "depth_weights": [], "composite_gain": 1.0}}
    report, data = f.build_report(results(finals), BASE, TIMING, learned, "standard")
    hc = data["arms"]["L3-hc"]
    assert hc["final_val_loss"] == [1.9, 1.95] and hc["mean"] == pytest.approx(1.925)
    assert hc["spread"] == pytest.approx(0.025)
    assert hc["val_curve"]["step"] == [2, 4]
    assert hc["val_curve"]["loss"] == pytest.approx([3.5, 1.925])
    assert hc["stream_rms_trained"] == [1.0 + k for k in range(7)]
    assert hc["grad_per_block_init"] == [0.5, 1.5, 2.5] and hc["grad_per_block_trained"] == [2.0] * 3
    assert data["learned"] == learned and data["timing"] == TIMING
    ids = {c["id"] for c in report.charts}
    assert {"finals", "val_loss_L3", "val_loss_L6", "stream_rms_L3", "grads_init_L6",
            "grads_trained_L3"} <= ids
    finals_chart = next(c for c in report.charts if c["id"] == "finals")
    hc_line = next(s for s in finals_chart["series"] if s["label"].startswith("hyper"))
    assert hc_line["x"] == [3, 6] and hc_line["lo"] == [1.9, 1.8] and hc_line["hi"] == [1.95, 1.9]
    texts_ = [c["en"] for c in report.conclusions]
    assert any("hc 12.5 ms (1.25x)" in t for t in texts_)
    assert any("1 mixing matrices, composite gain 1" in t for t in texts_)
    assert any("the same 1,024 tokens" in t for t in texts_)


# --- learned mixing matrices and depth weights, on a fake model --------------------

class FakeWrite(nn.Module):
    def __init__(self, matrix: torch.Tensor) -> None:
        super().__init__()
        self.raw = nn.Parameter(matrix)

    def mixing_matrix(self) -> torch.Tensor:
        return self.raw * 1.0


class FakeSublayer(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.hook_depth_weights = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(torch.arange(self.k, dtype=torch.float32).expand(*x.shape, self.k), -1)
        self.hook_depth_weights(w)
        return x


class FakeModel(HookedModule):
    def __init__(self, n_blocks: int = 11) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Module() for _ in range(n_blocks))
        for i, block in enumerate(self.blocks):
            block.residual = FakeWrite(torch.eye(2) * (i + 1))
            block.depth = FakeSublayer(i + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block.depth(x)
        return x


def test_reader_takes_matrices_from_attributes_and_weights_from_hooks_in_layer_order():
    model = FakeModel()
    got = read_learned(model, torch.zeros(3, 5))
    names = [e["name"] for e in got["mixing"]]
    assert names[:3] == ["blocks.0.residual", "blocks.1.residual", "blocks.2.residual"]
    assert names[-1] == "blocks.10.residual"  # natural order, not blocks.1 < blocks.10 < blocks.2
    assert got["mixing"][2]["matrix"] == [[3.0, 0.0], [0.0, 3.0]]
    weights = got["depth_weights"]
    assert [len(e["weights"]) for e in weights] == list(range(1, 12))
    expected = torch.softmax(torch.arange(4, dtype=torch.float32), 0)
    assert weights[3]["weights"] == pytest.approx(expected.tolist())  # averaged over [3, 5]


class FakeMHC(nn.Module):
    """The hook points of residual=mhc: pre, post [B, T, n] and comb [B, T, n, n]."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pre, self.hook_post, self.hook_comb = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        comb = torch.tensor([[0.25, 0.75], [0.75, 0.25]]).expand(*x.shape, 2, 2).clone()
        comb[0] = torch.tensor([[0.75, 0.25], [0.25, 0.75]])  # batch mean: all 0.5
        self.hook_pre(torch.full((*x.shape, 2), 0.5))
        self.hook_post(torch.full((*x.shape, 2), 1.5))
        self.hook_comb(comb)
        return x


class FakeHC(nn.Module):
    """The hook points of residual=hc: alpha = [A_m | A_r] [B, T, n, n+1], beta [B, T, n]."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_alpha, self.hook_beta = HookPoint(), HookPoint()
        self.mixing_matrix = torch.zeros(2, 2)  # ignored: the hooks answer first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = torch.tensor([[1.0, 1.0, 0.2], [0.0, 0.1, 1.0]])
        self.hook_alpha(alpha.expand(*x.shape, 2, 3))
        self.hook_beta(torch.tensor([1.0, 0.5]).expand(*x.shape, 2))
        return x


def test_reader_takes_the_mixing_of_mhc_and_hc_from_their_hook_points():
    class Model(HookedModule):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(nn.Module() for _ in range(2))
            self.blocks[0].attn_residual = FakeMHC()
            self.blocks[1].attn_residual = FakeHC()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blocks[1].attn_residual(self.blocks[0].attn_residual(x))

    mhc, hc = read_learned(Model(), torch.zeros(2, 3, dtype=torch.long))["mixing"]
    assert mhc == {"name": "blocks.0.attn_residual", "matrix": [[0.5, 0.5], [0.5, 0.5]],
                   "read": [0.5, 0.5], "write": [1.5, 1.5]}
    assert hc["name"] == "blocks.1.attn_residual"
    assert torch.allclose(torch.tensor(hc["matrix"]), torch.tensor([[1.0, 0.2], [0.1, 1.0]]))  # A_r
    assert hc["read"] == [1.0, 0.0] and hc["write"] == [1.0, 0.5]


def test_reader_tolerates_a_model_without_learned_mixing():
    assert read_learned(nn.Linear(2, 2)) == {"mixing": [], "depth_weights": []}
    assert read_learned(FakeModel(2), None)["depth_weights"] == []  # no batch: no hooks run


def test_composite_gain_is_one_for_doubly_stochastic_and_grows_for_unconstrained():
    ds = [[0.5, 0.5], [0.5, 0.5]], [[0.9, 0.1], [0.1, 0.9]]
    assert composite_gain(list(ds) * 20) == pytest.approx(1.0)
    assert composite_gain([[[2.0, 0.0], [0.0, 1.0]]] * 3) == pytest.approx(8.0)
    assert composite_gain([[[1.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 1.0]]]) == pytest.approx(3.0)
    # |row sum| and |column sum| of the product, as the mHC paper's Amax gain (and the
    # simulator): a signed matrix whose sums cancel has gain 1, not its entries' 2
    assert composite_gain([[[1.0, -1.0], [0.0, 1.0]]]) == pytest.approx(1.0)


# --- one micro run through the runner, with the arms every build has ----------------

@pytest.mark.slow
def test_micro_run_exports_the_report_and_the_page_data(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    subset = replace(f.EXPERIMENT, grid=lambda base, b, seeds: f.grid(base, b, seeds, only=ON_MAIN))
    monkeypatch.setitem(EXPERIMENTS, f.EXPERIMENT.name, subset)
    root = run_experiment(f.EXPERIMENT.name, budget="micro", out_dir=tmp_path, corpus=CORPUS,
                          progress=False, echo=False)
    export = json.loads((root / "export.json").read_text())
    assert validate_export(export) == []
    micro = BUDGETS["micro"]
    assert {f"val_loss_L{micro.deep}", f"val_loss_L{micro.deepest}", "finals"} <= {
        c["id"] for c in export["charts"]}
    data = json.loads((root / PAGE_DATA_FILE).read_text())
    assert set(data["arms"]) == {f.arm_name(d, a) for d in (micro.deep, micro.deepest)
                                 for a in ON_MAIN}
    assert set(data["timing"]["arms"]) == set(ON_MAIN)  # the benchmark covers the first depth
    assert data["timing"]["arms"]["plain"]["vs_plain"] == pytest.approx(1.0)
    plain = data["arms"][f.arm_name(micro.deep, "plain")]
    assert len(plain["grad_per_block_init"]) == micro.deep
    assert len(plain["stream_rms_trained"]) == 2 * micro.deep + 1
    assert data["learned"] == {}  # none of these arms learns a mixing
    assert any(c["en"].startswith("The micro budget ran") for c in export["conclusions"])


# --- the docs page, filled from the exported files ------------------------------------

def _script():
    import importlib.util

    path = Path(__file__).parents[1] / "scripts" / "frontier_results.py"
    spec = importlib.util.spec_from_file_location("frontier_results", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_page_has_a_measured_section_for_every_design_and_the_summary():
    script = _script()
    page = script.PAGE.read_text(encoding="utf-8")
    names = [m.group(2) for m in script.MARKER.finditer(page)]
    assert sorted(names) == sorted([*script.SECTIONS, "summary"])
    assert {a for arms in script.SECTIONS.values() for a in arms} == set(f.ARM_NAMES) - {
        "plain", "scaled"}


def test_docs_sections_are_rendered_from_the_export_only():
    script = _script()
    finals = {("plain", 3): [2.0, 2.1], ("hc", 3): [1.80, 1.82], ("rezero", 3): [2.0, 2.1],
              ("deepnorm", 6): [2.2, 2.3], ("post-ln", 6): [3.3, 3.31]}
    report, data = f.build_report(results(finals), BASE, TIMING,
                                  {"L3-hc": {"mixing": [{"name": "m", "matrix": [[1.0]]}] * 3,
                                             "depth_weights": [], "composite_gain": 1.0}},
                                  "standard")
    export = {"budget": "standard", "command": "depthlab experiment residual-frontier",
              "exported_at": "2026-01-01T00:00:00Z", "depthlab_version": "0",
              "conclusions": report.conclusions}
    data = json.loads(json.dumps(data, allow_nan=True))  # as read back from frontier.json
    filled = script.fill(script.PAGE.read_text(encoding="utf-8"), script.render(export, data))
    assert "Not measured yet" not in filled
    sections = {m.group(2): m.group(3) for m in script.MARKER.finditer(filled)}
    hc = sections["hc"]
    assert "1.8100 ± 0.0100 (2 seeds); against plain 2.0500: -0.2400, beyond the seed spread" in hc
    assert "time per step 12.5 ms, 1.25x plain's" in hc and "3 learned mixing matrices" in hc
    assert "within the seed spread ±0.1000: no difference claimed" in sections["rezero"]
    deepnorm = sections["deepnorm"]  # the C8 pair is reported, never compared with plain
    assert "2.2500 ± 0.0500" in deepnorm and "3.3050" in deepnorm and "against plain" not in deepnorm
    assert "Not an arm of the `standard` budget's grid." in sections["attnres"]
    assert report.conclusions[0]["en"] in sections["summary"]
    # filling twice gives the same page
    assert script.fill(filled, script.render(export, data)) == filled
    assert script.main(["frontier_results.py", "/nonexistent/residual-frontier"]) == 2
