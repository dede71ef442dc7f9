"""The real-model probes with known answers on tiny models: uniform attention gives
exactly H_T/T, removed writes leave the stream unchanged and the ablation at zero, a
planted activation is found at its dimension and token, the last lens state is the
model's own prediction, and every preset's switches go through."""

from __future__ import annotations

import json
import math

import pytest
import torch

from depthlab import rundir
from depthlab.cli import main
from depthlab.config import apply_overrides
from depthlab.model import Transformer
from depthlab.presets import PRESETS, get_preset
from depthlab.probes.realmodel import probe_run_dir, realmodel_probes, uniform_first_share

IDS = [3, 17, 5, 42, 8, 1, 30, 12, 7, 25, 9, 14, 2, 33, 19, 11]


def _model(preset: str = "tiny", seed: int = 0, **changes) -> Transformer:
    cfg = apply_overrides(get_preset(preset), [f"model.{k}={v}" for k, v in changes.items()])
    torch.manual_seed(seed)
    return Transformer(cfg.model).eval()


def _zero(*params: torch.nn.Parameter | None) -> None:
    with torch.no_grad():
        for p in params:
            if p is not None:
                p.zero_()


def test_uniform_first_share_is_the_harmonic_mean():
    assert uniform_first_share(1) == 1.0
    assert uniform_first_share(2) == pytest.approx(0.75)
    assert uniform_first_share(4) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)


@pytest.mark.parametrize("seed", [0, 7])
def test_attention_without_queries_is_uniform_causal(seed):
    """q = 0 makes every score 0: each query spreads evenly over its keys, so the first
    token's share is exactly H_T/T in every head, and no head passes 0.3 at T = 16."""
    model = _model(seed=seed)
    for block in model.blocks:
        _zero(block.attn.q_proj.weight, block.attn.q_proj.bias)
    a = realmodel_probes(model, IDS)["attention"]
    expected = uniform_first_share(len(IDS))
    assert a["uniform"] == pytest.approx(expected)
    for heads in a["first_token_share"]:
        assert heads == pytest.approx([expected] * len(heads), abs=1e-6)
    assert a["heads_above"] == 0.0 and a["n_heads_above"] == 0


def test_removed_writes_leave_the_stream_and_the_loss_unchanged():
    model = _model(seed=1)
    for block in model.blocks:
        _zero(block.attn.o_proj.weight, block.mlp.down_proj.weight)
    r = realmodel_probes(model, IDS)
    s = r["stream"]
    assert s["rms"] == pytest.approx([s["rms"][0]] * len(s["rms"]), rel=1e-6)
    assert s["write_ratio"] == [0.0] * 2 * model.cfg.n_layers
    assert s["angular_distance"] == pytest.approx([0.0] * 2 * model.cfg.n_layers, abs=1e-3)
    assert r["ablation"]["delta_loss"] == pytest.approx([0.0] * model.cfg.n_layers, abs=1e-6)
    assert len(set(r["lens"]["top_id"])) == 1  # every state reads out the same


def test_skipping_a_block_without_writes_costs_nothing_and_the_others_cost_something():
    model = _model(seed=2, n_layers=4)
    _zero(model.blocks[2].attn.o_proj.weight, model.blocks[2].mlp.down_proj.weight)
    d = realmodel_probes(model, IDS)["ablation"]["delta_loss"]
    assert d[2] == pytest.approx(0.0, abs=1e-7)
    assert all(abs(x) > 1e-5 for i, x in enumerate(d) if i != 2)


def _ablation_one_by_one(model: Transformer, idx: torch.Tensor, base: float) -> list[float]:
    """The definition: a whole pass per block with that block's two writes zeroed."""
    from depthlab.probes.realmodel import next_token_loss

    zero = lambda t, _name: torch.zeros_like(t)
    out = []
    for i in range(model.cfg.n_layers):
        with torch.no_grad(), model.hooks(fwd=[(f"blocks.{i}.hook_attn_write", zero),
                                               (f"blocks.{i}.hook_mlp_write", zero)]):
            out.append(next_token_loss(model(idx), idx) - base)
    return out


@pytest.mark.parametrize("changes", [{}, {"placement": "post"}, {"residual": "mhc", "streams": 2},
                                     {"x0_mix": "true"}, {"value_residual": "true"}])
def test_the_batched_ablation_is_the_one_pass_per_block_ablation(changes, monkeypatch):
    """Copies started at their own block (a model whose blocks pass only the stream) or
    batches of whole passes (the others), with batches forced small so both batch and
    remainder run: the same losses as one whole pass per block, to float32 rounding."""
    from depthlab.probes import realmodel as rm

    model = _model(seed=4, n_layers=5, **changes)
    with torch.no_grad():  # writes large enough that removing one moves the loss
        for block in model.blocks:
            block.attn.o_proj.weight.mul_(20)
            block.mlp.down_proj.weight.mul_(20)
    idx = torch.tensor([IDS])
    monkeypatch.setattr(rm, "ABLATION_BATCH_BYTES", 2 * len(IDS) * model.cfg.vocab_size * 4)
    with torch.no_grad():
        logits, cache = model.run_with_cache(idx, names=[f"blocks.{i}.hook_resid_pre" for i in range(5)])
    base = rm.next_token_loss(logits, idx)
    pre = [cache[f"blocks.{i}.hook_resid_pre"] for i in range(5)]
    want = _ablation_one_by_one(model, idx, base)
    assert max(map(abs, want)) > 1e-4  # the blocks matter, so the comparison means something
    for given in (pre, None):
        got = rm.ablation_probes(model, idx, base, given)["delta_loss"]
        assert got == pytest.approx(want, rel=1e-3, abs=5e-6), (changes, given is None)
    assert rm._steps_alone(model) == (not changes.keys() & {"x0_mix", "value_residual"})


def test_a_planted_massive_activation_is_found_at_its_dimension_and_token():
    model = _model(seed=3)
    token, dim, pos = IDS[5], 11, 5
    with torch.no_grad():
        model.embed_tokens.weight[token, dim] = 300.0
    m = realmodel_probes(model, IDS)["massive"]
    assert (m["dim"][0], m["token"][0]) == (dim, pos)
    assert m["max_abs"][0] == pytest.approx(300.0)
    assert m["largest"]["dim"] == dim and m["largest"]["token"] == pos
    assert m["largest"]["ratio"] > 1000


def test_the_stream_reference_is_sqrt_1_plus_k_through_the_first_write():
    s = realmodel_probes(_model(seed=4), IDS)["stream"]
    assert s["rms_expected"][0] is None and s["rms_expected"][1] == pytest.approx(s["rms"][1])
    for k in range(1, len(s["rms"])):
        assert s["rms_expected"][k] == pytest.approx(s["rms"][1] * math.sqrt((1 + k) / 2))
    assert len(s["rms_per_token"]) == len(IDS) and len(s["rms_per_token"][0]) == len(s["rms"])


def test_the_last_lens_state_is_the_models_prediction_and_the_cached_scale_is_wrong_before():
    model = _model(seed=5)
    target = 9
    r = realmodel_probes(model, IDS, target=target)
    lens = r["lens"]
    with torch.no_grad():
        logits = model(torch.tensor([IDS]))[0, -1].double()
    p = logits.softmax(-1)
    assert lens["prob"][-1] == pytest.approx(p[target].item(), rel=1e-5)
    assert lens["rank"][-1] == int((logits > logits[target]).sum())
    assert lens["top_id"][-1] == int(logits.argmax())
    entropy = -(p * p.log()).sum().item()
    assert lens["entropy"][-1] == pytest.approx(entropy, rel=1e-5)
    assert lens["entropy_cached_scale"][-1] == pytest.approx(entropy, rel=1e-5)
    assert r["n_tokens"] == len(IDS) and len(lens["states"]) == 2 * model.cfg.n_layers + 1


def test_cached_scale_lens_divides_by_the_final_streams_rms_instead_of_its_own():
    """At init the logits are too small for entropies to tell (SmolLM2 does: see
    test_realmodel_smollm2); the logits themselves show the wrong scale exactly."""
    from depthlab.probes.realmodel import lens_logits

    model = _model(seed=5)
    gen = torch.Generator().manual_seed(0)
    d = model.cfg.d_model
    x, final = torch.randn(1, 4, d, generator=gen), 7 * torch.randn(1, 4, d, generator=gen)
    rms = lambda t: t.pow(2).mean(-1, keepdim=True).sqrt()
    with torch.no_grad():
        right, wrong = lens_logits(model, x), lens_logits(model, x, cached_from=final)
        assert torch.allclose(lens_logits(model, final, cached_from=final),
                              lens_logits(model, final), atol=1e-6)
    assert torch.allclose(wrong, right * rms(x) / rms(final), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("changes", [{}, {"norm": "layernorm"}])
def test_the_cached_scale_logits_from_the_lens_logits_are_the_products(changes):
    """Given the correct lens's logits, the cached-scale ones are derived (the head is
    linear after the norm: rescaled, the norm's bias through the head added back) and
    equal the product of the rescaled state with the head."""
    from depthlab.probes.realmodel import lens_logits

    model = _model(seed=6, **changes)
    if changes:  # a bias that matters
        torch.nn.init.normal_(model.final_norm.bias, std=0.5, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(2)
    d = model.cfg.d_model
    x, final = torch.randn(5, 1, d, generator=gen), 6 * torch.randn(5, 1, d, generator=gen)
    with torch.no_grad():
        product = lens_logits(model, x, cached_from=final)
        derived = lens_logits(model, x, cached_from=final, logits=lens_logits(model, x))
    assert torch.allclose(derived, product, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(derived, lens_logits(model, x), rtol=1e-2)  # the scale differs


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_goes_through_and_the_last_lens_state_is_the_prediction(preset):
    model = _model(preset, seed=6)
    r = realmodel_probes(model, IDS[:8])
    with torch.no_grad():
        logits = model(torch.tensor([IDS[:8]]))[0, -1]
    assert r["lens"]["top_id"][-1] == int(logits.argmax())
    assert r["lens"]["rank"][-1] == 0  # the default target is the model's own top-1
    L = model.cfg.n_layers
    att = [i for i, k in enumerate(model.cfg.layer_kinds) if k == "attention"]
    assert len(r["attention"]["first_token_share"]) == len(att) and r["attention"]["layers"] == att
    assert len(r["ablation"]["delta_loss"]) == L and len(r["grad_norm"]) == 2 * L
    json.dumps(r, allow_nan=False)  # plain JSON for the page


@pytest.fixture
def tiny_run(tmp_path):
    model = _model(seed=8)
    cfg = get_preset("tiny")
    run = tmp_path / "tiny-run"
    rundir.write_config(run, cfg)
    rundir.save_weights(run, model)
    return run


def test_probe_run_cli_json_table_and_plot(tiny_run, tmp_path, capsys):
    ids = ",".join(map(str, IDS[:10]))
    assert main(["probe", "run", str(tiny_run), "--ids", ids, "--target", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lens"]["target_id"] == 4 and out["prompt_ids"] == IDS[:10]
    assert {"stream", "attention", "massive", "lens", "ablation", "grad_norm"} <= set(out)
    png = tmp_path / "probes.png"
    assert main(["probe", "run", str(tiny_run), "--ids", ids, "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert png.stat().st_size > 10_000
    for heading in ("The residual stream after each write", "Attention on the first token",
                    "Massive activations", "Logit lens", "Skipping one block"):
        assert heading in text
    same = probe_run_dir(tiny_run, IDS[:10], target=4)
    assert same["lens"] == out["lens"]  # deterministic


@pytest.mark.parametrize("argv, needle", [
    (["--ids", "1,2", "--target", "99999"], "target token id"),
    (["--prompt", "hello"], "give token ids with --ids"),
    (["--ids", "1,x"], "--ids must be"),
    (["--ids", "1,2", "--plot", "out.txt"], ".png or .svg"),
])
def test_probe_run_bad_input_is_one_line(tiny_run, capsys, argv, needle):
    assert main(["probe", "run", str(tiny_run), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("residual, streams", [("hc", 4), ("mhc", 4), ("attnres", 1)])
def test_realmodel_probes_read_a_widened_stream_as_the_model_reads_it_out(residual, streams):
    from depthlab.config import ModelConfig
    from depthlab.probes.realmodel import realmodel_probes

    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, context_len=16, n_layers=2, d_model=16,
                                    n_heads=2, residual=residual, streams=streams))
    ids = [1, 2, 3, 4, 5]
    out = realmodel_probes(model, ids)
    assert len(out["stream"]["states"]) == 2 * 2 + 1
    # the lens of the last state is the model's own next-token distribution
    with torch.no_grad():
        probs = model(torch.tensor([ids]))[0, -1].double().softmax(-1)
    entropy = float(-(probs * probs.log()).sum())
    assert out["lens"]["entropy"][-1] == pytest.approx(entropy, rel=1e-5)


LENS_LABELS = ["embed", "0.attn", "0.mlp", "1.attn", "1.mlp"]


@pytest.mark.parametrize("rank, stays, first", [
    ([3, 1, 0, 0, 0], "0.mlp", "0.mlp"),  # found and kept: one state names both
    ([2, 0, 1, 0, 0], "1.attn", "0.attn"),  # top-1, lost, back: stays from 1.attn only
    ([1, 0, 0, 2, 4], None, "0.attn"),  # top-1 for a while, not at the end
    ([0, 0, 0, 0, 0], "embed", "embed"),
    ([5, 4, 3, 2, 1], None, None),  # never
])
def test_the_lens_reading_names_where_the_target_stays_top1(rank, stays, first):
    from depthlab.probes.realmodel import lens_reading

    assert lens_reading(rank, LENS_LABELS) == {"stays_top1": stays, "first_top1": first}


@pytest.mark.parametrize("rank, stays, first", [
    ([3, 1, 0, 0, 0], "0.mlp", "0.mlp"),
    ([2, 0, 1, 0, 0], "1.attn", "0.attn"),
    ([1, 0, 0, 2, 4], None, "0.attn"),
])
def test_the_lens_reads_a_constructed_stream_as_its_hand_computed_rank_table(rank, stays, first):
    """One-hot unembedding rows make each logit the normed stream's coordinate: a state
    where the target's coordinate is 1 and r others are 2 ranks the target r, exactly."""
    from depthlab.probes.realmodel import lens_probes

    model = _model(seed=0, vocab_size=16, d_model=32)  # 2 blocks: 5 states, tied embeddings
    with torch.no_grad():
        model.embed_tokens.weight.copy_(torch.eye(16, 32))
    target = 3
    states = torch.zeros(len(rank), 2, 32)
    for k, r in enumerate(rank):
        states[k, -1, target] = 1.0
        others = [j for j in range(16) if j != target][:r]
        states[k, -1, others] = 2.0
        states[k, -1, 16:] = 0.5  # width the unembedding does not read
    with torch.no_grad():
        lens = lens_probes(model, states, target, LENS_LABELS)
    assert lens["rank"] == rank
    assert (lens["stays_top1"], lens["first_top1"]) == (stays, first)


def test_the_lens_sentence_says_both_states_when_they_differ():
    from depthlab.probes.realmodel import lens_sentence

    back = lens_sentence("' cold'", "1.attn", "0.attn")
    assert back["en"] == ("' cold' is top-1 from 1.attn on, in every state to the end; it was "
                          "top-1 already at 0.attn, then lost that place.")
    assert "1.attn" in back["zh"] and "0.attn" in back["zh"] and back["zh"].endswith("。")
    assert lens_sentence("'x'", "0.mlp", "0.mlp")["en"] == "'x' is top-1 from 0.mlp on, in every state to the end."
    assert lens_sentence("'x'", None, "0.attn")["en"].endswith("it is not top-1 at the end.")
    assert lens_sentence("'x'", None, None)["en"] == "'x' never becomes top-1."


def test_probe_run_cli_shows_byte_level_tokens_as_text(tmp_path, capsys):
    """A byte-level BPE too small to hold Chinese characters whole: the report shows each
    character once (never '\\ufffd'), numbered from 0, and how a typed target tokenised."""
    from depthlab.tokenizer import BPETokenizer

    text = "残差连接把每一层的输出加回到残差流上。The residual stream."
    tok = BPETokenizer.train(text * 3, 270)
    cfg = apply_overrides(get_preset("tiny"), [f"model.vocab_size={tok.vocab_size}"])
    run = tmp_path / "bpe-run"
    torch.manual_seed(0)
    rundir.write_config(run, cfg)
    rundir.save_weights(run, Transformer(cfg.model))
    tok.save(run / rundir.TOKENIZER_FILE)
    prompt = "残差流把每一层加回"
    assert any(len(tok.encode(c)) > 1 for c in prompt)  # some characters span tokens
    assert main(["probe", "run", str(run), "--prompt", prompt, "--target", " 残"]) == 0
    out = capsys.readouterr().out
    assert "\ufffd" not in out
    import re

    header = out.splitlines()[0]
    shown = re.findall(r"(\d+)(?:-(\d+))? '([^']*)'", header.split("numbered from 0 (", 1)[1])
    assert "".join(t for _, _, t in shown) == prompt  # every character once, in order
    assert shown[0][0] == "0" and any(b for _, b, _ in shown)  # from 0; a character over tokens
    n = len(tok.hf.encode(" 残", add_special_tokens=False).ids)
    assert f"The target ' 残' is {n} token" in out
    assert main(["next-token", "--run", str(run), "--prompt", prompt, "--show", "20"]) == 0
    assert "\ufffd" not in capsys.readouterr().out


def test_a_hybrids_deltanet_mixing_matrix_is_its_rule_applied_to_the_values():
    """The effective mixing matrix of each Gated DeltaNet layer, applied to the layer's own
    values, gives the delta rule's output (the recurrent loop, not the chunked form that
    built the matrix); the attention shares cover the attention layers, by block number."""
    from depthlab.model.deltanet import recurrent_gated_delta_rule
    from depthlab.probes.realmodel import DELTA_SITES, deltanet_mixing
    model = _model("qwen3_5", seed=3)
    kinds = model.cfg.layer_kinds
    att = [i for i, k in enumerate(kinds) if k == "attention"]
    delta = [i for i, k in enumerate(kinds) if k != "attention"]
    assert att and delta  # the preset is a hybrid
    r = realmodel_probes(model, IDS)
    assert r["attention"]["layers"] == att == r["attention_maps"]["layers"]
    assert len(r["attention_maps"]["maps"]) == len(att)
    assert r["deltanet_mixing"]["layers"] == delta
    sites = [f"blocks.{i}.attn.{s}" for i in delta for s in (*DELTA_SITES, "hook_v")]
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([IDS]), names=sites)
    for i in delta:
        q, k, g, beta, v = (cache[f"blocks.{i}.attn.{s}"].double() for s in (*DELTA_SITES, "hook_v"))
        M = deltanet_mixing(q[0], k[0], g[0], beta[0])
        expected, _ = recurrent_gated_delta_rule(q, k, v, g, beta)
        assert torch.allclose(M @ v[0], expected[0], rtol=1e-9, atol=1e-12)
        assert bool((M.triu(1) == 0).all())  # causal
        thousandths = r["deltanet_mixing"]["maps"][delta.index(i)]
        assert thousandths[0][-1][:3] == (M[0, -1, :3] * 1000).round().long().tolist()


def test_an_all_deltanet_model_has_no_attention_to_report_and_says_so():
    from depthlab.cli.realmodel_report import _attention
    from depthlab.web.realmodel import readings
    model = _model("qwen3_5", seed=4, layer_pattern="L")
    r = realmodel_probes(model, IDS[:8])
    assert r["attention"] is None and r["attention_maps"] is None
    assert r["deltanet_mixing"]["layers"] == list(range(model.cfg.n_layers))
    assert "No softmax attention layer" in " ".join(_attention(r))
    said = readings(r | {"tokens": None, "n_tokens": 8})
    assert "no softmax attention" in said["attention"]["en"]
    assert "softmax" in said["maps"]["en"] and "softmax" in said["maps"]["zh"]
    json.dumps(r, allow_nan=False)


def test_probe_run_on_a_hybrid_run_names_its_deltanet_layers(tmp_path, capsys):
    cfg = get_preset("qwen3_5")
    torch.manual_seed(5)
    run = tmp_path / "hybrid-run"
    rundir.write_config(run, cfg)
    rundir.save_weights(run, Transformer(cfg.model).eval())
    ids = ",".join(map(str, IDS[:10]))
    assert main(["probe", "run", str(run), "--ids", ids]) == 0
    table = capsys.readouterr().out
    delta = [i for i, k in enumerate(cfg.model.layer_kinds) if k != "attention"]
    assert f"Layers {', '.join(map(str, delta))} are Gated DeltaNet layers" in table
    assert main(["probe", "run", str(run), "--ids", ids, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deltanet_mixing"]["layers"] == delta
