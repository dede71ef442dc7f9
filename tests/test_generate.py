"""Generation and the next-token view on a tiny trained run, with and without a tokenizer."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from depthlab.cli import main
from depthlab.generate import generate
from depthlab.presets import tiny
from depthlab.rundir import load_model
from depthlab.train import train

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    cfg = tiny()
    cfg = replace(cfg, data=replace(cfg.data, corpus=str(DATA / "tiny_hongloumeng.txt")),
                  train=replace(cfg.train, steps=20))
    train(cfg, root / "run", progress=False, cache_root=root / "cache")
    return root / "run"


def test_greedy_is_deterministic_and_sampling_follows_the_seed(run):
    model, _ = load_model(run)
    prompt = [1, 2, 3]
    a = generate(model, prompt, 12, greedy=True)
    assert len(a) == 12 and a == generate(model, prompt, 12, greedy=True)
    s1 = generate(model, prompt, 12, temperature=1.0, top_k=5, seed=7)
    assert s1 == generate(model, prompt, 12, temperature=1.0, top_k=5, seed=7)
    top1 = generate(model, prompt, 12, top_k=1, seed=3)
    assert top1 == a  # top-k 1 is greedy
    # a temperature so small that logits / T overflows float32 (or T rounds to 0 in it):
    # softmax's limit, the greedy tokens, not "probability tensor contains inf"
    for t in (1e-30, 1e-45, 1e-300, 5e-324):
        assert generate(model, prompt, 12, temperature=t, seed=1) == a, t
        assert generate(model, prompt, 12, temperature=t, top_k=3, seed=1) == a, t


def test_no_cache_gives_the_same_tokens_without_building_a_cache(run, capsys, monkeypatch):
    from depthlab import generate as gen

    argv = ["generate", "--run", str(run), "--prompt", "宝玉", "--tokens", "8", "--greedy", "--json"]
    assert main(argv) == 0
    cached = json.loads(capsys.readouterr().out)["ids"]

    def no_cache_here(*a, **k):
        raise AssertionError("--no-cache built a cache")

    monkeypatch.setattr(gen, "KVCache", no_cache_here)
    assert main([*argv, "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["ids"] == cached
    with pytest.raises(AssertionError, match="built a cache"):
        main(argv)


def test_generate_cli_json(run, capsys):
    assert main(["generate", "--run", str(run), "--prompt", "宝玉", "--tokens", "8",
                 "--greedy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"prompt", "prompt_ids", "ids", "text"}
    assert out["prompt"] == "宝玉" and len(out["ids"]) == 8 and len(out["text"]) == 8


def test_next_token_cli_json(run, capsys):
    assert main(["next-token", "--run", str(run), "--prompt", "宝玉", "--show", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"tokens", "shapes", "top"}
    assert [t["text"] for t in out["tokens"]] == ["宝", "玉"]
    stages = [s["stage"] for s in out["shapes"]]
    assert stages == ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post",
                      "hook_final", "logits"]
    assert out["shapes"][0]["shape"] == [2, 32]
    probs = [t["prob"] for t in out["top"]]
    assert len(probs) == 4 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1


def test_prompt_ids_without_tokenizer(run, tmp_path, capsys):
    bare = tmp_path / "bare"
    shutil.copytree(run, bare)
    (bare / "tokenizer.json").unlink()
    assert main(["generate", "--run", str(bare), "--prompt-ids", "1,2,3", "--tokens", "4",
                 "--greedy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prompt_ids"] == [1, 2, 3] and len(out["ids"]) == 4 and out["text"] is None
    assert main(["next-token", "--run", str(bare), "--prompt-ids", "5,6"]) == 0
    assert "Top 10 next tokens" in capsys.readouterr().out
    assert main(["generate", "--run", str(bare), "--prompt", "宝玉"]) == 2
    assert "--prompt-ids" in capsys.readouterr().err


@pytest.mark.parametrize("argv, phrase", [
    (["--prompt-ids", "1,x"], "--prompt-ids"),
    (["--prompt-ids", "99999"], "outside the model's vocabulary"),
    (["--prompt", "宝", "--temperature", "0"], "--greedy"),
    (["--prompt", "宝", "--seed", "99999999999999999999999"], "--seed must be an integer from 0"),
    (["--prompt", "宝", "--seed", "-1"], "--seed must be an integer from 0"),
])
def test_generate_errors(run, capsys, argv, phrase):
    assert main(["generate", "--run", str(run), *argv]) == 2
    assert phrase in capsys.readouterr().err


def test_next_token_refuses_ids_outside_the_vocabulary(run, capsys):
    for ids in ("99999", "1,4096"):
        assert main(["next-token", "--run", str(run), "--prompt-ids", ids]) == 2
        err = capsys.readouterr().err
        assert "outside the model's vocabulary" in err and len(err.splitlines()) == 1, err
