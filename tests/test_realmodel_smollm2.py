"""The field's findings, measured on SmolLM2-135M (Q4_1 dequantised) from its wheel: an
attention sink, a massive activation, a growing stream, a lens that finds " Paris" only
near the top, and a cached-scale lens that gets the entropies wrong. Slow."""

from __future__ import annotations

import pytest

from depthlab.probes.realmodel import probe_run_dir

pytest.importorskip("gguf")
pytestmark = pytest.mark.slow

from test_gguf_smollm2 import imported_smollm2  # noqa: E402  (one import per session)

TEXT = ("The residual stream carries information from the bottom of a deep network to the top. "
        "Each block reads the stream, computes an update, and adds it back.")


@pytest.fixture(scope="module")
def run():
    from depthlab.errors import UserError

    try:
        return imported_smollm2()[1]
    except UserError as e:  # the wheel is not installed
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def probes(run):
    return probe_run_dir(run, TEXT)


@pytest.fixture(scope="module")
def paris(run):
    return probe_run_dir(run, "The capital of France is", target=" Paris")


def test_attention_sink_well_above_uniform(probes):
    a = probes["attention"]
    assert probes["n_tokens"] > 25
    shares = a["layer_share"]  # measured: 26 of 30 layers above 2x uniform, mean 3.8x
    assert sum(s > 2 * a["uniform"] for s in shares) >= 0.75 * len(shares)
    assert sum(shares) / len(shares) > 3 * a["uniform"]
    assert a["heads_above"] > 0.5


def test_a_massive_activation_orders_of_magnitude_above_the_median(probes):
    big = probes["massive"]["largest"]
    assert big["ratio"] > 1000 and big["value"] > 1000
    assert big["token"] == 0  # on the first token, as Sun et al. report


def test_stream_grows_and_deep_writes_are_diluted(probes):
    s = probes["stream"]
    assert max(s["rms"]) > 100 * s["rms"][1]
    L = probes["n_layers"]
    middle = s["write_ratio"][L // 2: 3 * L // 2]
    assert sorted(middle)[len(middle) // 2] < 0.05  # most middle writes move the stream little


def test_recomputed_and_cached_scale_lens_entropies_differ(probes, paris):
    for r in (probes, paris):
        lens = r["lens"]
        gaps = [abs(a - b) for a, b in zip(lens["entropy"], lens["entropy_cached_scale"], strict=True)]
        assert max(gaps) > 1.0  # nats: TransformerLens #1076 on a real model
        assert gaps[-1] < 1e-6  # the last state's own scale is the cached one


def test_paris_becomes_top1_near_the_top_and_skipping_blocks_costs(paris):
    lens = paris["lens"]
    assert lens["target"] == " Paris" and lens["rank"][-1] == 0 and lens["prob"][-1] > 0.5
    assert lens["typed"]["ids"] == [lens["target_id"]]  # " Paris", space kept: one token
    stays = lens["states"].index(lens["stays_top1"])
    assert stays > len(lens["states"]) // 2  # not in the bottom half
    deltas = paris["ablation"]["delta_loss"]
    assert max(deltas) > 1.0


@pytest.fixture(scope="module")
def shipped(run, tmp_path_factory):
    """Every shipped prompt on SmolLM2 through the page's API (in-process; its disk cache
    in a fresh runs folder)."""
    import threading

    from depthlab.web.realmodel import PROMPTS, ProbeRequest, RealModelProbes

    root = tmp_path_factory.mktemp("runs")
    (root / "smollm2").symlink_to(run)
    probes = RealModelProbes(root, threading.Lock())
    return {p["id"]: probes.probe(ProbeRequest(run="smollm2", prompt=p["text"], target=p["target"]))
            for p in PROMPTS}


def test_shakespeare_lens_top1_leaves_and_comes_back(shipped):
    """Measured: the final top-1 ('\\n') ranks first at 9.mlp, loses that place and holds it
    only from 11.mlp. The reading names both, each where the rank table puts it."""
    lens = shipped["shakespeare"]["result"]["lens"]
    rank, states = lens["rank"], lens["states"]
    first, stays = states.index(lens["first_top1"]), states.index(lens["stays_top1"])
    assert first < stays  # the case a first-only reading gets wrong
    assert rank[first] == 0 and all(r > 0 for r in rank[:first])
    assert all(r == 0 for r in rank[stays:]) and rank[stays - 1] > 0
    reading = shipped["shakespeare"]["readings"]["lens"]
    for lang in ("en", "zh"):
        assert lens["stays_top1"] in reading[lang] and lens["first_top1"] in reading[lang]


def test_the_zh_view_of_every_shipped_prompt_shows_no_replacement_character(shipped):
    """SmolLM2's byte-level tokens split Chinese characters; the answer shows them merged
    (or as <0xHH>): tokens, lens target, top-1s and the readings in both languages."""
    import json

    from depthlab.web.realmodel import PROMPTS

    for p in PROMPTS:
        body = shipped[p["id"]]
        assert "\ufffd" not in json.dumps(body, ensure_ascii=False), p["id"]
        r = body["result"]
        assert "".join(piece["text"] for piece in r["token_pieces"]) == p["text"]
        if p["lang"] == "zh":  # most characters span two or three tokens
            assert sum(piece["stop"] - piece["start"] > 1 for piece in r["token_pieces"]) >= 5


def test_the_embedding_and_all_60_writes_sum_to_the_paris_logit(paris):
    """The final stream is the embedding plus every write: through the final norm's frozen
    scale, their direct contributions add up to the model's own " Paris" logit."""
    d = paris["dla"]
    assert paris["lens"]["target"] == " Paris" and d["target_id"] == paris["lens"]["target_id"]
    assert len(d["contribution"]) == 61 and d["terms"][0] == "embed" and d["bias"] == 0.0
    assert abs(d["gap"]) <= d["tolerance"]  # float32 rounding of one dot product of 576 terms
    assert d["tolerance"] < 1e-3 * abs(d["logit"])
    # measured: the last block's FFN writes most of it (+7.0 of 17.4)
    assert d["top"][0]["term"] == "29.mlp" and d["top"][0]["value"] > 0.25 * d["logit"]


def test_the_lens_grid_and_the_maps_of_the_paris_prompt(paris):
    g, a = paris["lens_grid"], paris["attention_maps"]
    assert len(g["states"]) == 31 and len(g["top_id"][0]) == paris["n_tokens"]
    assert g["text"][str(g["top_id"][-1][-1][0])] == " Paris"
    assert a["kv_heads"] == 3 and len(a["maps"]) == 30 and len(a["maps"][0]) == 9
    assert a["row_sum_error"] < 1e-5
    # the sink, seen in the maps: most heads of the middle layers put most of the last query on token 0
    last = [head[-1][0] for layer in a["maps"][5:25] for head in layer]
    assert sum(v > 500 for v in last) > len(last) / 2
