"""The real-model API: it lists every run under --runs (trained, GGUF-imported), probes
one on a prompt, answers again from the disk cache (also after a restart), and refuses
bad input with a 4xx that names the field."""

from __future__ import annotations

import json

import pytest
import torch
from fastapi.testclient import TestClient

from depthlab import rundir
from depthlab.config import apply_overrides
from depthlab.model import Transformer
from depthlab.presets import get_preset
from depthlab.tokenizer import BPETokenizer
from depthlab.web.app import create_app
from depthlab.web.realmodel import PROMPTS

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A course-style BPE run nested like an experiment's, a GGUF import, and a run
    without weights (not listed)."""
    from test_gguf import write_tiny_gguf

    from depthlab.hf.gguf_import import import_gguf

    root = tmp_path_factory.mktemp("runs")
    text = " ".join(p["text"] for p in PROMPTS) * 5
    tok = BPETokenizer.train(text, 300)
    cfg = apply_overrides(get_preset("tiny"), [f"model.vocab_size={tok.vocab_size}"])
    course = root / "residual" / "runs" / "course-4"
    torch.manual_seed(0)
    rundir.write_config(course, cfg)
    rundir.save_weights(course, Transformer(cfg.model))
    tok.save(course / rundir.TOKENIZER_FILE)
    rundir.write_config(root / "empty", cfg)  # config but no weights
    gguf_path = root.parent / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    import_gguf(gguf_path, root / "tiny-gguf")
    return root


@pytest.fixture()
def client(runs):
    return page_client(runs)


def page_client(runs):
    """A client like the page: it sends the server's write token (test_web_security.py)."""
    c = TestClient(create_app(runs, warm=False))
    meta = c.get("/api/meta").json()
    c.headers[meta["token_header"]] = meta["write_token"]
    return c


def test_lists_every_run_with_weights(client):
    listed = {r["name"]: r for r in client.get("/api/realmodel/runs").json()}
    assert set(listed) == {"residual/runs/course-4", "tiny-gguf"}
    assert listed["tiny-gguf"]["kind"] == "gguf" and listed["residual/runs/course-4"]["kind"] == "trained"
    assert listed["tiny-gguf"]["n_layers"] == 2 and listed["tiny-gguf"]["tokenizer"]


def test_prompts_in_both_languages_with_questions(client):
    body = client.get("/api/realmodel/prompts").json()
    assert {p["lang"] for p in body["prompts"]} == {"en", "zh"}
    assert set(body["questions"]) >= {"stream", "attention", "massive", "collapse", "lens", "ablation"}
    assert all(set(q) == {"en", "zh"} for q in body["questions"].values())


@pytest.mark.parametrize("run", ["tiny-gguf", "residual/runs/course-4"])
def test_probe_is_computed_once_then_read_from_disk(runs, client, run):
    req = {"run": run, "prompt": PROMPTS[0]["text"], "target": " Paris"}
    first = client.post("/api/realmodel/probe", json=req)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["cached"] is False and body["run"] == run
    r = body["result"]
    assert r["run"] == run and str(runs) not in json.dumps(body)  # no server paths
    assert {"stream", "attention", "massive", "lens", "ablation"} <= set(r)
    assert r["lens"]["target"] == " Paris"[: len(r["lens"]["target"])] and r["lens"]["target"]
    assert set(body["readings"]["attention"]) == {"en", "zh", "parts"}
    assert set(body["readings"]["attention"]["parts"]) == {"en", "zh"}

    again = client.post("/api/realmodel/probe", json=req).json()
    assert again["cached"] is True and again["result"] == r
    restarted = page_client(runs)  # a new server reads the same file
    assert restarted.post("/api/realmodel/probe", json=req).json()["cached"] is True
    other = client.post("/api/realmodel/probe", json={**req, "target": None}).json()
    assert other["cached"] is False  # another key


def test_a_reimported_run_is_measured_again(runs, client, tmp_path):
    from test_gguf import write_tiny_gguf

    from depthlab.hf.gguf_import import import_gguf

    req = {"run": "tiny-gguf", "prompt": PROMPTS[2]["text"]}
    before = client.post("/api/realmodel/probe", json=req).json()
    write_tiny_gguf(tmp_path / "other.gguf", seed=9)
    import_gguf(tmp_path / "other.gguf", runs / "tiny-gguf", force=True)
    after = client.post("/api/realmodel/probe", json=req).json()
    assert after["cached"] is False and after["result"]["loss"] != before["result"]["loss"]


def test_a_second_probe_does_not_load_the_model_again(runs, monkeypatch):
    """The server keeps a run's model and tokenizer: new prompts (not in the disk cache)
    cost their probes, not a load. Counted by wrapping rundir.load_model."""
    loads = []
    real = rundir.load_model
    monkeypatch.setattr(rundir, "load_model", lambda run, **kw: loads.append(run) or real(run, **kw))
    c = page_client(runs)
    for p in PROMPTS[:3]:
        req = {"run": "residual/runs/course-4", "prompt": p["text"] + " (counted)"}
        r = c.post("/api/realmodel/probe", json=req)
        assert r.status_code == 200 and r.json()["cached"] is False, r.text
    assert len(loads) == 1


def test_the_loaded_runs_are_bounded_and_follow_the_files(runs, monkeypatch):
    from depthlab.web.realmodel import LoadedRuns

    kept = LoadedRuns(kept=1)
    a, b = runs / "residual" / "runs" / "course-4", runs / "tiny-gguf"
    for run in (a, b, a, a):
        kept.get(run)
    assert kept.loads == 3 and len(kept._runs) == 1  # b pushed a out; a then stayed
    weights = a / rundir.WEIGHTS_FILE
    st = weights.stat()
    import os

    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # "rewritten"
    kept.get(a)
    assert kept.loads == 4 and len(kept._runs) == 1


@pytest.mark.parametrize("req, status, field", [
    ({"run": "../etc", "prompt": "hello there"}, 404, "run"),
    ({"run": "empty", "prompt": "hello there"}, 404, "run"),
    ({"run": "tiny-gguf", "prompt": ""}, 422, "prompt"),
    ({"run": "tiny-gguf", "prompt": "x" * 401}, 422, "prompt"),
    ({"run": "tiny-gguf", "prompt": "a"}, 400, "prompt"),
    ({"run": "tiny-gguf", "prompt": "hello", "extra": 1}, 422, "extra"),
    ({"run": "tiny-gguf", "prompt": "hello", "target": "x" * 41}, 422, "target"),
])
def test_bad_requests_name_the_field(client, req, status, field):
    r = client.post("/api/realmodel/probe", json=req)
    assert r.status_code == status
    assert r.json()["error"].startswith(field)


def test_the_lens_target_is_taken_verbatim_and_its_tokens_are_shown(client):
    """' Paris' and 'Paris' are different tokens: the space is kept, and the answer says
    how the typed text tokenised (the lens follows its first token)."""
    run = "residual/runs/course-4"
    got = {}
    for target in (" Paris", "Paris"):
        body = client.post("/api/realmodel/probe", json={"run": run, "prompt": PROMPTS[0]["text"],
                                                         "target": target}).json()
        typed = body["result"]["lens"]["typed"]
        assert body["target"] == target and typed["text"] == target
        assert "".join(p["text"] for p in typed["pieces"]) == target
        assert body["result"]["lens"]["target_id"] == typed["ids"][0]
        got[target] = typed["ids"]
    assert got[" Paris"][0] != got["Paris"][0]


def test_every_shipped_prompt_shows_no_replacement_character(runs, client):
    """Byte-level tokens split Chinese characters: tokens, lens target, top-1s and the
    readings in both languages show merged characters or <0xHH>, never '�'."""
    seen_zh = 0
    for run in ("residual/runs/course-4", "tiny-gguf"):
        readable = {p["id"]: p["readable"] for p in
                    client.get("/api/realmodel/prompts", params={"run": run}).json()["prompts"]}
        for p in PROMPTS:
            if not readable[p["id"]]:
                continue
            body = client.post("/api/realmodel/probe", json={"run": run, "prompt": p["text"],
                                                             "target": p["target"]}).json()
            r = body["result"]
            assert "�" not in json.dumps(body, ensure_ascii=False), (run, p["id"])
            assert "".join(piece["text"] for piece in r["token_pieces"]) == p["text"]
            seen_zh += p["lang"] == "zh"
    assert seen_zh >= 2  # the course BPE reads both Chinese prompts


def test_runs_say_the_language_they_were_trained_on(tmp_path):
    from depthlab.web.realmodel import list_runs

    cfg = get_preset("tiny")
    made = {"hlm": ({"corpus": "hongloumeng"}, {}), "shk": ({}, {}),
            "smol": ({}, {"source": {"format": "gguf", "name": "Smollm2 135M 8k Lc100K Mix1 Ep2"}}),
            "other": ({}, {"source": {"format": "huggingface", "name": "some/model"}})}
    for name, (data, extra) in made.items():
        run = tmp_path / name
        c = apply_overrides(cfg, [f"data.{k}={v}" for k, v in data.items()])
        rundir.write_config(run, c, **extra)
        (run / rundir.WEIGHTS_FILE).write_bytes(b"")
    langs = {r["name"]: r["trained_on"] for r in list_runs(tmp_path)}
    assert langs == {"hlm": "zh", "shk": "en", "smol": "en", "other": None}


def _token_quotes(r: dict) -> set[str]:
    """Every token text (quoted as Python's repr) or id a reading of the probe `r` may quote."""
    texts = set(r.get("tokens") or []) | set((r["lens_grid"].get("text") or {}).values())
    texts |= {r["lens"]["target"]} if r["lens"].get("target") is not None else set()
    ids = set(r["prompt_ids"]) | set(r["lens_grid"].get("text", {}).keys()) | {r["lens"]["target_id"]}
    return {repr(t) for t in texts} | {f"id {i}" for i in ids} | {repr(r["lens"]["target_id"])}


def test_every_reading_keeps_its_tokens_apart_from_its_prose(runs, client):
    """Each reading of every shipped prompt, in both languages, is its parts joined, and
    its code parts are exactly the tokens it quotes: prose such as "layer's" is never code."""
    for run in ("residual/runs/course-4", "tiny-gguf"):
        readable = {p["id"]: p["readable"] for p in
                    client.get("/api/realmodel/prompts", params={"run": run}).json()["prompts"]}
        for p in (p for p in PROMPTS if readable[p["id"]]):
            body = client.post("/api/realmodel/probe", json={"run": run, "prompt": p["text"],
                                                             "target": p["target"]}).json()
            quotes = _token_quotes(body["result"])
            for name, reading in body["readings"].items():
                for lang in ("en", "zh"):
                    parts = reading.get("parts", {lang: [reading[lang]]})[lang]
                    assert "".join(parts) == reading[lang], (run, p["id"], name, lang)
                    assert set(parts[1::2]) <= quotes, (run, p["id"], name, lang, parts)
            # every reading whose template quotes a token has it as a part
            for name in ("attention", "massive", "lens", "path", "grid", "maps"):
                assert all(len(body["readings"][name]["parts"][lang]) == 3 for lang in ("en", "zh")), name
