"""attn-gate's first-token share: known answers on hand-made attention, the sink verdict's
threshold, the real-model measurement and its cache, and the grid's wide pair."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from depthlab.errors import UserError
from depthlab.experiments import BUDGETS, get_experiment
from depthlab.experiments import sink as sink_mod
from depthlab.experiments.attn_gate import WIDE, real_sentence, sink_sentence
from depthlab.experiments.sink import SINK_RATIO, Profile, first_token_profile, is_sink
from depthlab.experiments.spec import base_config
from depthlab.experiments.wording import same
from depthlab.probes.realmodel import uniform_first_share

CORPUS = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")


class HandMadeAttention:
    """A model whose attention weights are given: `patterns(T)` -> one [H, T, T] per layer."""

    def __init__(self, patterns):
        self.patterns = patterns
        self.cfg = SimpleNamespace(n_layers=len(patterns(2)))

    def run_with_cache(self, x, names):
        T = x.shape[1]
        return None, {n: p[None] for n, p in zip(names, self.patterns(T), strict=True)}


def uniform(T, heads=3):
    causal = torch.tril(torch.ones(T, T, dtype=torch.float64))
    return (causal / causal.sum(-1, keepdim=True)).expand(heads, T, T)


def on_first(T, heads=3):
    p = torch.zeros(heads, T, T, dtype=torch.float64)
    p[:, :, 0] = 1.0
    return p


@pytest.mark.parametrize("T", [1, 7, 64, 256])
def test_uniform_attention_gives_h_t_over_t_and_all_on_token_0_gives_one(T):
    x = torch.zeros(4, T, dtype=torch.long)
    flat = first_token_profile(HandMadeAttention(lambda t: [uniform(t), uniform(t)]), x)
    harmonic = sum(1 / n for n in range(1, T + 1)) / T
    assert flat.layers == pytest.approx([harmonic] * 2, abs=1e-12)
    assert flat.uniform == pytest.approx(harmonic, abs=1e-12) and flat.tokens == T
    sunk = first_token_profile(HandMadeAttention(lambda t: [on_first(t)] * 3), x)
    assert sunk.layers == pytest.approx([1.0] * 3) and sunk.share == pytest.approx(1.0)
    assert sunk.ratio == pytest.approx(T / sum(1 / n for n in range(1, T + 1)))


def test_the_profile_is_per_layer_and_the_share_averages_all_heads():
    T = 16
    half = torch.cat([on_first(T, 1), uniform(T, 1)])  # one head sunk, one uniform
    p = first_token_profile(HandMadeAttention(lambda t: [uniform(t, 2), half, on_first(t, 2)]),
                torch.zeros(2, T, dtype=torch.long))
    u = uniform_first_share(T)
    assert p.layers == pytest.approx([u, (1 + u) / 2, 1.0])
    assert p.share == pytest.approx((u + (1 + u) / 2 + 1) / 3)


def test_a_course_model_with_zero_queries_attends_uniformly():
    from depthlab.model import Transformer
    from depthlab.presets import tiny

    for gate in (False, True):
        cfg = replace(tiny().model, attn_gate=gate)
        model = Transformer(cfg).double()
        with torch.no_grad():
            for block in model.blocks:
                block.attn.q_proj.weight.zero_()
        x = torch.randint(0, cfg.vocab_size, (3, 24))
        p = first_token_profile(model, x)
        assert p.layers == pytest.approx([uniform_first_share(24)] * cfg.n_layers, abs=1e-9)


def test_sink_threshold_is_twice_uniform():
    assert SINK_RATIO == 2.0
    assert is_sink(0.2001, 0.1) and not is_sink(0.2, 0.1) and not is_sink(0.05, 0.1)
    assert not is_sink(float("nan"), 0.1)


def test_sink_sentence_claims_a_sink_and_a_gate_effect_only_from_the_numbers():
    def seeds(*shares):  # one profile per seed, every layer at the given share
        return [Profile([s] * 4, 0.074, 64) for s in shares]

    shape = same("d 128")
    sunk = sink_sentence(shape, seeds(0.20, 0.22), seeds(0.10, 0.11))["en"]
    assert "an attention sink (over 2x)" in sunk and "2.84x" in sunk
    assert "moves the share by -10.50 points (2 seeds, spread ±1.50)" in sunk
    assert "Layers over 2x on their own without the gate: 0, 1, 2, 3." in sunk
    assert "21.00 ± 1.00% without the gate" in sunk
    assert "2.84 / 2.84 / 2.84 / 2.84 without the gate, 1.42 / 1.42 / 1.42 / 1.42 with it" in sunk
    under = sink_sentence(shape, seeds(0.10, 0.12), seeds(0.105, 0.125))["en"]
    assert "under the sink threshold of 2x" in under and "no attention sink" in under
    assert "within the seed spread" in under and "none is claimed" in under
    assert "No single layer is over 2x without the gate either" in under
    one_layer = [Profile([0.05, 0.2, 0.05, 0.05], 0.074, 64)]
    mixed = sink_sentence(shape, one_layer, one_layer)
    assert "in the model as a whole" in mixed["en"]
    assert "Layers over 2x on their own without the gate: 1." in mixed["en"]
    below = sink_sentence(shape, seeds(0.07), seeds(0.07))
    assert "below the uniform share itself" in below["en"] and "1 seed" in below["en"]
    assert "低于均匀占比本身" in below["zh"]


def test_real_sentence_names_the_layers_above_the_threshold():
    p = Profile([0.05, 0.05, 0.5, 0.6, 0.1], 0.074, 64)
    text = real_sentence(p)["en"]
    assert "2 of its 5 layers are above 2x uniform (the first: layer 2)" in text
    assert "from 5.0% (layer 0) to 60.0% (layer 3)" in text and "8 windows of 64 tokens" in text


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny trained run with its own (char) tokenizer, standing in for SmolLM2."""
    import os

    from depthlab.experiments import run_experiment

    old = os.environ.get("DEPTHLAB_CACHE")
    os.environ["DEPTHLAB_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    out = tmp_path_factory.mktemp("exp")
    run_experiment("attn-gate", budget="micro", out_dir=out, corpus=CORPUS, progress=False,
                   echo=False)
    yield out / "attn-gate" / "runs" / "no-gate-s0"
    if old is None:
        os.environ.pop("DEPTHLAB_CACHE")
    else:
        os.environ["DEPTHLAB_CACHE"] = old


def test_a_model_on_text_tokenised_by_its_own_tokenizer_matches_its_run_and_is_cached(
        trained_run, tmp_path, monkeypatch):
    from depthlab.rundir import read_config

    cfg, _ = read_config(trained_run)
    text = sink_mod.validation_text(cfg.data)
    own = sink_mod.run_profile(trained_run)
    cache = tmp_path / "cache.json"
    # a char tokenizer encodes the validation text back to the run's own windows
    got = sink_mod.model_profiles(trained_run, text, [cfg.train.seq_len, 8], cache)
    assert got[cfg.train.seq_len] == own and got[8].tokens == 8
    monkeypatch.setattr(sink_mod, "load_model", lambda *_: pytest.fail("not cached"))
    assert sink_mod.model_profiles(trained_run, text, [8], cache)[8] == got[8]
    with pytest.raises(pytest.fail.Exception):  # other text: measured again
        sink_mod.model_profiles(trained_run, text[:-1], [8], cache)
    cache.write_text("{broken")
    with pytest.raises(pytest.fail.Exception):
        sink_mod.model_profiles(trained_run, text, [8], cache)


def test_without_the_wheel_smollm2_is_one_sentence(trained_run, tmp_path, monkeypatch):
    from depthlab.rundir import read_config

    def missing():
        raise UserError("SmolLM2 is not installed")

    monkeypatch.setattr("depthlab.hf.gguf_import.smollm2_path", missing)
    cfg, _ = read_config(trained_run)
    note = sink_mod.smollm2_profiles(tmp_path, cfg.data, [16], tmp_path / "c.json")
    assert note["en"].startswith("SmolLM2-135M is not measured: its wheel is not installed")
    assert "pip install" in note["en"] and note["zh"].startswith("未测 SmolLM2-135M")


def test_micro_export_draws_the_profile_per_layer_with_the_uniform_line(trained_run):
    import json

    export = json.loads((trained_run.parents[1] / "export.json").read_text())
    chart = next(c for c in export["charts"] if c["id"] == "first_token")
    labels = [s["label"] for s in chart["series"]]
    assert len(labels) == 6 and labels[-2].startswith("uniform") and labels[-1].startswith("sink")
    assert chart["series"][-2]["y"] == [1.0, 1.0] and chart["series"][-1]["y"] == [2.0, 2.0]
    assert all(len(s["x"]) == 4 for s in chart["series"][:4])  # the course model's 4 layers
    assert [row[0] for row in export["table"]["rows"]][2:] == [
        "no gate, d 64, context 32, 6 steps", "sigmoid output gate, d 64, context 32, 6 steps"]
    assert (trained_run.parents[1] / "attn-gate-first_token.png").is_file()


def test_quick_keeps_one_pair_and_standard_adds_the_wide_pair():
    exp = get_experiment("attn-gate")
    quick, standard, full = BUDGETS["quick"], BUDGETS["standard"], BUDGETS["full"]
    assert {s.arm for s in exp.grid(base_config(quick), quick, 1)} == {"no-gate", "gate"}
    specs = exp.grid(base_config(standard), standard, standard.seeds)
    wide = [s for s in specs if s.arm in WIDE]
    assert len(wide) == 2 * standard.seeds
    for s in wide:
        assert (s.cfg.model.d_model, s.cfg.train.seq_len) == (256, 256)
        assert s.cfg.train.steps > standard.steps
        assert s.cfg.model.attn_gate == (s.arm == "wide-gate")
    assert {s.cfg.model.d_model for s in exp.grid(base_config(full), full, 1)} == {128, 256}
    assert standard.real_model and quick.real_model and not BUDGETS["micro"].real_model


@pytest.mark.slow
def test_smollm2_has_a_sink_in_its_middle_layers_and_none_in_its_first_two(tmp_path, monkeypatch):
    """Measured: 6.6x uniform overall on the Shakespeare validation split and 6.9x on the
    tiny corpus's (64 tokens); layers 0-1 at 0.66-0.95x, 26-27 of 30 layers over 2x. The
    bounds below leave room on both sides of those numbers."""
    from test_gguf_smollm2 import imported_smollm2

    from depthlab.presets import tiny

    try:
        model_dir = imported_smollm2()[1]
    except UserError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    text = sink_mod.validation_text(replace(tiny().data, corpus=CORPUS))
    p = sink_mod.model_profiles(model_dir, text, [64], tmp_path / "c.json")[64]
    ratios = [v / p.uniform for v in p.layers]
    assert len(ratios) == 30 and p.ratio > 4
    assert max(ratios[:2]) < SINK_RATIO
    assert sum(r > SINK_RATIO for r in ratios) >= 20


def test_each_pair_is_drawn_against_the_baselines_of_its_own_tokens(trained_run):
    """The wide pair is scored on longer windows than the course pair: its loss charts
    carry the unigram and bigram losses of those windows, not the course pair's."""
    import json

    from depthlab.experiments.baselines import baselines
    from depthlab.rundir import read_config

    root = trained_run.parents[1]
    export = json.loads((root / "export.json").read_text())
    charts = {c["id"]: c for c in export["charts"]}
    for chart_id, run in (("val_loss", "no-gate-s0"), ("wide_val_loss", "wide-no-gate-s0")):
        cfg, _ = read_config(root / "runs" / run)
        want = baselines(cfg)
        lines = [s for s in charts[chart_id]["series"] if "baseline" in s["label"]]
        assert [s["y"][0] for s in lines] == pytest.approx([want.unigram, want.bigram])
        arms = {s["label"] for s in charts[chart_id]["series"]} - {s["label"] for s in lines}
        assert all(("context 32" in a) == chart_id.startswith("wide") for a in arms), arms
    small, wide = (read_config(root / "runs" / r)[0] for r in ("no-gate-s0", "wide-no-gate-s0"))
    assert small.train.seq_len != wide.train.seq_len
