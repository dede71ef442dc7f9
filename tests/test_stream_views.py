"""The stream as a sum of writes (depthlab.probes.stream_views) on tiny models: direct
logit attribution sums to the model's own logit, the PCA path keeps a planar path's
geometry, the lens grid's top row is the model's prediction, attention maps are causal
softmax rows with grouped and gated heads."""

from __future__ import annotations

import json
import math

import pytest
import torch

from depthlab import rundir
from depthlab.cli import main
from depthlab.config import apply_overrides
from depthlab.model import Transformer
from depthlab.presets import get_preset
from depthlab.probes.realmodel import probe_run_dir, realmodel_probes
from depthlab.probes.stream_views import attention_maps, stream_path

IDS = [3, 17, 5, 42, 8, 1, 30, 12, 7]


def _model(seed: int = 0, **changes) -> Transformer:
    cfg = apply_overrides(get_preset("tiny"), [f"model.{k}={v}" for k, v in changes.items()])
    torch.manual_seed(seed)
    model = Transformer(cfg.model).eval()
    with torch.no_grad():  # trained-looking norms: weights and biases away from 1 and 0
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("changes", [
    {}, {"norm": "layernorm"}, {"norm": "rmsnorm_zero_centered"}, {"final_norm": False},
    {"residual": "deepnorm", "placement": "post"}, {"placement": "post"}, {"placement": "sandwich"},
    {"residual": "hc", "streams": 2}, {"n_kv_heads": 1}, {"attn_gate": True},
])
@pytest.mark.parametrize("position", [None, 0, 4])
def test_the_embedding_and_every_write_sum_to_the_models_logit(changes, position):
    model = _model(seed=3, **changes)
    r = realmodel_probes(model, IDS, target=11, position=position)
    d = r["dla"]
    pos = len(IDS) - 1 if position is None else position
    with torch.no_grad():
        logit = float(model(torch.tensor([IDS]))[0, pos, 11])
    L = model.cfg.n_layers
    assert d["available"] and d["position"] == pos and len(d["contribution"]) == 2 * L + 1
    assert d["terms"][0] == "embed" and d["terms"][-1] == f"{L - 1}.mlp"
    assert d["logit"] == pytest.approx(logit, abs=d["tolerance"])
    assert abs(d["gap"]) <= d["tolerance"]
    assert d["sum"] == pytest.approx(sum(d["contribution"]) + d["bias"], abs=1e-12 * (1 + abs(d["sum"])))
    # the bound is float32 rounding of one dot product, far below the logit's scale
    assert d["tolerance"] < 1e-3 * sum(abs(c) for c in d["contribution"])
    assert (d["bias"] != 0) == (changes.get("norm") == "layernorm")
    # the top contributors are the largest |terms|, in order
    tops = [abs(t["value"]) for t in d["top"]]
    assert tops == sorted(tops, reverse=True) and tops[0] == max(map(abs, d["contribution"]))


@pytest.mark.parametrize("changes", [
    {"n_layers": 4, "backout": True}, {"x0_mix": True}, {"unet_skips": True},
    {"smear": True, "value_embeds": True}, {"logit_softcap": 2},
    {"residual": "ngpt", "norm": "none", "final_norm": False},
])
def test_the_terms_sum_to_the_logit_with_the_stream_shortcuts_and_ngpt(changes):
    # backout subtracts after the last write (one more term), x0 mixing and U-net skips
    # change the stream between writes (inside the differences), nGPT scales each logit
    # by its own s_z, the softcap bends the logit after the sum (the terms sum to the
    # logit before it).
    model = _model(seed=2, **changes)
    with torch.no_grad():  # learned scalars away from their init, so each one counts
        for name, p in model.named_parameters():
            if any(k in name for k in ("lam", "x0_mix", "unet_skip", "s_z")):
                p.add_(0.2 * torch.randn_like(p))
    d = realmodel_probes(model, IDS, target=11)["dla"]
    with torch.no_grad():
        logit = float(model(torch.tensor([IDS]))[0, -1, 11])
    L = model.cfg.n_layers
    backout = changes.get("backout", False)
    assert len(d["contribution"]) == 2 * L + 1 + backout
    assert (d["terms"][-1] == "backout") == backout
    cap = changes.get("logit_softcap")
    assert d["softcap"] == cap
    total = d["sum"] if cap is None else cap * math.tanh(d["sum"] / cap)  # tanh contracts
    assert total == pytest.approx(logit, abs=d["tolerance"])
    assert abs(d["gap"]) <= d["tolerance"]


def test_without_writes_the_embedding_is_the_whole_logit():
    model = _model(seed=1)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
    d = realmodel_probes(model, IDS, target=5)["dla"]
    assert all(c == 0 for c in d["contribution"][1:])
    assert d["contribution"][0] == pytest.approx(d["logit"], abs=d["tolerance"])


def test_a_write_term_is_that_write_through_the_frozen_final_norm():
    """Contribution of write k = write_k * (norm weight / RMS(final)) . W_U[target],
    computed here from the hook's write itself (the plain residual adds it as it is)."""
    model = _model(seed=2)
    r = realmodel_probes(model, IDS, target=9)
    _, cache = model.run_with_cache(torch.tensor([IDS]), names=["blocks.1.hook_mlp_write",
                                                                "blocks.1.hook_resid_post"])
    final = cache["blocks.1.hook_resid_post"][0, -1].double()
    write = cache["blocks.1.hook_mlp_write"][0, -1].double()
    norm = model.final_norm
    weight = norm.weight.detach().double()
    scale = 1 / math.sqrt(float(final.pow(2).mean()) + norm.eps)
    u = model.embed_tokens.weight[9].detach().double()  # tiny ties the LM head to the embedding
    want = float(write * scale * weight @ u)
    # the stream's change is the write up to float32 rounding of the add: |x| * eps32 per entry
    slack = 4 * 2**-23 * float((final.abs() * scale * (weight * u).abs()).sum())
    assert r["dla"]["contribution"][-1] == pytest.approx(want, abs=slack)


def test_dyt_has_no_frozen_scale_and_says_so():
    d = realmodel_probes(_model(norm="dyt"), IDS)["dla"]
    assert d["available"] is False and "DyT" in d["reason"]


def test_a_planar_path_keeps_its_steps_and_all_its_variance():
    """States on a plane of R^D: the two components hold all the variance, and each
    write's arrow has the length of the write (PCA is a rotation within the plane)."""
    gen = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(16, 2, generator=gen, dtype=torch.float64))
    coords = torch.randn(7, 4, 2, generator=gen, dtype=torch.float64)  # S=7 states, T=4 tokens
    states = coords @ basis.T
    p = stream_path(states, 2)
    assert p["variance_2d"] == pytest.approx(1.0, abs=1e-12)
    xy = torch.tensor([p["x"], p["y"]], dtype=torch.float64).T
    steps = (xy[1:] - xy[:-1]).norm(dim=-1)
    want = (states[1:, 2] - states[:-1, 2]).norm(dim=-1)
    assert torch.allclose(steps, want, atol=2e-4)  # coordinates rounded to 4 decimals
    assert p["longest"] == int(want.argmax()) + 1
    # the embedding's arrow starts at the zero vector: its length is the embedding's norm
    first = math.dist(p["origin"], (p["x"][0], p["y"][0]))
    assert first == pytest.approx(float(states[0, 2].norm()), abs=2e-4)
    assert p["fit_first_token"] is False


def test_the_lens_grid_top_row_is_the_models_own_top5():
    model = _model(seed=4)
    g = realmodel_probes(model, IDS)["lens_grid"]
    L = model.cfg.n_layers
    assert g["states"] == list(range(0, 2 * L + 1, 2))  # embedding and every block's output
    with torch.no_grad():
        probs = model(torch.tensor([IDS]))[0].double().softmax(-1)
    top = probs.topk(5, dim=-1)
    last = g["top_id"][-1]
    for t in range(len(IDS)):
        # ties aside, the same five tokens in the same order; probabilities rounded to 4 decimals
        assert last[t][0] == int(top.indices[t, 0])
        assert g["top_prob"][-1][t] == pytest.approx(top.values[t].tolist(), abs=6e-5)
        assert g["top_prob"][-1][t] == sorted(g["top_prob"][-1][t], reverse=True)


@pytest.mark.parametrize("changes", [{}, {"n_kv_heads": 1}, {"attn_gate": True}])
def test_attention_maps_are_causal_softmax_rows_of_every_head(changes):
    model = _model(seed=5, **changes)
    r = realmodel_probes(model, IDS)
    a = r["attention_maps"]
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(torch.tensor([IDS]), names=names)
    T = len(IDS)
    assert a["row_sum_error"] < 1e-5 and a["kv_heads"] == model.cfg.kv_heads
    assert len(a["maps"]) == model.cfg.n_layers and len(a["maps"][0]) == model.cfg.n_heads
    for layer, name in zip(a["maps"], names, strict=True):
        for head, want in zip(layer, cache[name][0], strict=True):
            assert [len(row) for row in head] == list(range(1, T + 1))  # query q sees keys 0..q
            for q, row in enumerate(head):
                # thousandths: each rounded by at most 1/2, so a row sums to 1000 within (q + 1) / 2
                assert abs(sum(row) - 1000) <= (q + 1) / 2
                assert row == [round(1000 * float(v)) for v in want[q, : q + 1]]
            assert float(want.triu(1).abs().max()) == 0.0  # nothing on a later key


def test_long_prompts_keep_the_row_check_but_not_the_maps():
    T = 70
    pattern = torch.full((2, T, T), 0.0).tril()
    pattern = pattern + torch.eye(T)
    a = attention_maps([pattern / pattern.sum(-1, keepdim=True)])
    assert a["maps"] is None and a["n_tokens"] == T and a["row_sum_error"] < 1e-6


@pytest.fixture
def tiny_run(tmp_path):
    model = _model(seed=8)
    run = tmp_path / "tiny-run"
    rundir.write_config(run, get_preset("tiny"))
    rundir.save_weights(run, model)
    return run


def test_probe_run_json_and_tables_carry_the_writes_and_the_grid(tiny_run, capsys):
    ids = ",".join(map(str, IDS))
    assert main(["probe", "run", str(tiny_run), "--ids", ids, "--target", "4", "--position", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dla"]["position"] == 3 and out["dla"]["target_id"] == 4
    assert abs(out["dla"]["gap"]) <= out["dla"]["tolerance"]
    assert len(out["lens_grid"]["top_id"][0]) == len(IDS)
    assert out["path"]["position"] == 3
    assert out == json.loads(json.dumps(probe_run_dir(tiny_run, IDS, target=4, position=3),
                                        allow_nan=False)) | {"run": out["run"]}
    assert main(["probe", "run", str(tiny_run), "--ids", ids]) == 0
    text = capsys.readouterr().out
    assert "Direct contributions to the logit" in text and "Logit-lens grid" in text


@pytest.mark.parametrize("pos", ["9", "-10", "x"])
def test_probe_run_position_out_of_range_is_one_line(tiny_run, capsys, pos):
    ids = ",".join(map(str, IDS))
    try:
        code = main(["probe", "run", str(tiny_run), "--ids", ids, "--position", pos])
    except SystemExit as e:  # argparse refuses a non-integer before the handler runs
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "position" in err and len(err.strip().splitlines()) == 1


def test_the_reading_counts_writes_and_names_the_cap():
    # backout is a term but no write; with a softcap the reading says which logit it means
    from depthlab.web.realmodel import stream_readings

    r = realmodel_probes(_model(seed=2, n_layers=4, backout=True, logit_softcap=2), IDS, target=11)
    read = stream_readings(r)["dla"]
    assert "the 8 writes add up to" in read["en"] and "8 次写入" in read["zh"]
    assert "logit softcap of 2, that logit is the one before the cap" in read["en"]
    assert "软上限" in read["zh"]
    plain = stream_readings(realmodel_probes(_model(seed=2), IDS, target=11))["dla"]
    assert "the 4 writes add up to" in plain["en"] and "softcap" not in plain["en"]


def test_a_tall_paths_fit_is_the_direct_svds_to_the_last_digit(monkeypatch):
    """More states x tokens than twice the width: the fit factors QR first (as LAPACK's
    gesdd does inside) and must give what the SVD of the whole matrix gives, signs too."""
    gen = torch.Generator().manual_seed(3)
    states = torch.randn(9, 8, 24, generator=gen, dtype=torch.float64) * torch.linspace(
        0.5, 3, 24, dtype=torch.float64)
    got = stream_path(states, 5)
    monkeypatch.setattr(torch.linalg, "qr", lambda a, mode: (None, a))  # the direct SVD
    assert stream_path(states, 5) == got
