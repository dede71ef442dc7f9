"""Malformed inputs across the whole command line: configs, flags, corpora, run
directories, checkpoints, Hugging Face folders and probe arguments.

Every case must end with exit code 2 (3 for a divergence), exactly one line on
stderr, no traceback, and the protected files (a trained run, a Hugging Face
folder, the corpus) bitwise unchanged. Cases call `depthlab.cli.main` in-process;
a few go through a real `python -m depthlab` to prove the entry point behaves the same.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from depthlab.cli import main
from depthlab.hf import model_config_from_hf
from depthlab.hf.mapping import LLAMA_NAMES
from depthlab.hf.weights import hf_name
from depthlab.model import Transformer
from depthlab.presets import tiny
from depthlab.train import train
from tests.test_hf_refusals import BASE as HF_BASE  # a tiny Llama config.json
from tests.test_hf_refusals import write_hf
from tests.train_helpers import REPO, TEXT


@dataclass(frozen=True)
class World:
    run: Path  # a finished tiny run (4 steps, checkpoints at 2 and 4)
    hf: Path  # a small Llama checkpoint folder
    root: Path

    def protected(self) -> dict[str, str]:
        files = [p for d in (self.run, self.hf) for p in sorted(d.rglob("*"))
                 if p.is_file() and p.name != ".lock"] + [Path(TEXT)]
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    # A case that allocated instead of refusing must fail here, not take the machine down:
    # cap the address space (torch itself needs ~3 GB of it) for this module only.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = min(12 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY
                                            else min(cap, hard), hard))
    root = tmp_path_factory.mktemp("fuzz")
    old = os.environ.get("DEPTHLAB_CACHE")
    os.environ["DEPTHLAB_CACHE"] = str(root / "cache")
    cfg = tiny()
    cfg = replace(cfg, data=replace(cfg.data, corpus=TEXT),
                  train=replace(cfg.train, steps=4, ckpt_every=2, eval_every=2, probe_every=2))
    train(cfg, root / "good", progress=False)
    yield World(root / "good", write_hf(root / "hf", HF_BASE), root)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if old is None:
        os.environ.pop("DEPTHLAB_CACHE")
    else:
        os.environ["DEPTHLAB_CACHE"] = old


# --- builders: each returns argv, creating what it needs under `tmp` -------------------

Build = Callable[[Path, World], list[str]]


def text_file(tmp: Path, content: str | bytes, name: str = "c.json") -> str:
    path = tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


def cfg_json(tmp: Path, raw: object) -> str:
    return text_file(tmp, json.dumps(raw))


def run_copy(tmp: Path, world: World, mutate: Callable[[Path], None]) -> str:
    run = tmp / "run"
    shutil.copytree(world.run, run, ignore=shutil.ignore_patterns(".lock"))
    mutate(run)
    return str(run)


def edit_config(**model: object) -> Callable[[Path], None]:
    def mutate(run: Path) -> None:
        record = json.loads((run / "config.json").read_text())
        record["config"]["model"].update(model)
        (run / "config.json").write_text(json.dumps(record))
    return mutate


def write(name: str, content: str | bytes) -> Callable[[Path], None]:
    def mutate(run: Path) -> None:
        (run / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return mutate


def remove(name: str) -> Callable[[Path], None]:
    return lambda run: (run / name).unlink()


def weights_times(factor: float, only: tuple[str, ...] = (),
                  then: tuple[str, float] | None = None) -> Callable[[Path], None]:
    """RUN/model.safetensors with its tensors (or `only` these) multiplied by `factor`."""
    def mutate(run: Path) -> None:
        from safetensors.torch import load_file
        state = load_file(str(run / "model.safetensors"))
        for name, t in state.items():
            if not only or name in only:
                t.mul_(factor)
        if then is not None:
            state[then[0]].mul_(then[1])
        save_file(state, str(run / "model.safetensors"))
    return mutate


def every_checkpoint(name: str, content: bytes) -> Callable[[Path], None]:
    def mutate(run: Path) -> None:
        for folder in (run / "checkpoints").iterdir():
            (folder / name).write_bytes(content)
    return mutate


def hf_dir(tmp: Path, change: dict | None = None, weights: bool = True,
           mutate: Callable[[Path], None] | None = None) -> str:
    raw = {**HF_BASE, **(change or {})}
    raw = {k: v for k, v in raw.items() if v is not ...}
    folder = tmp / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    if weights:
        model_cfg, _ = model_config_from_hf(HF_BASE)
        state = {hf_name(k, LLAMA_NAMES): v for k, v in Transformer(model_cfg).state_dict().items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if mutate:
        mutate(folder)
    return str(folder)


CASES: list[tuple[str, Build, int]] = []


def case(name: str, build: Build, code: int = 2) -> None:
    CASES.append((name, build, code))


# --- configs: every malformed file through `model describe` and `train` ----------------

NESTED = "[" * 100_000 + "]" * 100_000
BAD_CONFIGS: dict[str, str | bytes | object] = {
    "not-json": "{model: 1}",
    "json-array": [1, 2, 3],
    "json-string": "just text",
    "nested-100000": NESTED,
    "nested-object": '{"model": ' * 50_000 + "{}" + "}" * 50_000,
    "unknown-section": {"modle": {}},
    "section-not-object": {"model": [1, 2]},
    "unknown-key": {"model": {"n_layer": 4}},
    "int-as-text": {"model": {"n_layers": "four"}},
    "int-null": {"model": {"n_layers": None}},
    "int-as-float": {"model": {"n_layers": 4.5}},
    "int-as-bool": {"model": {"n_layers": True}},
    "float-nan": '{"model": {"init_std": NaN}}',
    "float-infinity": '{"train": {"lr": Infinity}}',
    "huge-int": '{"model": {"d_model": 1' + "0" * 400 + "}}",
    "huge-int-5000-digits": '{"model": {"d_model": 1' + "0" * 5000 + "}}",
    "huge-float": '{"train": {"lr": 1e400}}',
    "negative-width": {"model": {"d_model": -8}},
    "heads-not-dividing": {"model": {"d_model": 30, "n_heads": 4}},
    "zero-layers": {"model": {"n_layers": 0}},
    "too-many-layers": {"model": {"n_layers": 5000}},
    "unknown-norm": {"model": {"norm": "batchnorm"}},
    "unknown-placement": {"model": {"placement": "middle"}},
    "post-without-norm": {"model": {"norm": "none", "placement": "post"}},
    "odd-rope-head": {"model": {"d_model": 12, "n_heads": 4}},
    "kv-heads-not-dividing": {"model": {"n_kv_heads": 3}},
    "clamp-on-relu": {"model": {"ffn": "relu", "ffn_clamp": 7.0}},
    "seq-over-context": {"model": {"context_len": 16}, "train": {"seq_len": 64}},
    "val-fraction": {"data": {"val_fraction": 0.9}},
    "bpe-vocab": {"data": {"tokenizer": "bpe", "bpe_vocab": 10}},
    "device": {"train": {"device": "tpu"}},
    "dtype": {"train": {"dtype": "fp8"}},
    "lr-overflow": {"train": {"lr": 1e38}},
    "wrapped-config-list": {"config": [1]},
    "binary": b"\x00\x01\x02\xff" * 64,
    "latin1": b'{"model": {"norm": "\xe9"}}',
    "empty": "",
    "vocab-too-big-for-memory": {"model": {"vocab_size": 10**12}},
}


def _config_case(content: object) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        if isinstance(content, (str, bytes)):
            return text_file(tmp, content)
        return cfg_json(tmp, content)
    return make


for _name, _content in BAD_CONFIGS.items():
    _make = _config_case(_content)
    if _name == "vocab-too-big-for-memory":  # only --check allocates; train takes the
        case(f"describe-check-config-{_name}",  # tokenizer's vocabulary instead
             lambda tmp, w, m=_make: ["model", "describe", "--check", "--config", m(tmp)])
        continue
    case(f"describe-config-{_name}",
         lambda tmp, w, m=_make: ["model", "describe", "--config", m(tmp)])
    case(f"train-config-{_name}",
         lambda tmp, w, m=_make: ["train", "--config", m(tmp), "--corpus", TEXT,
                                  "--out", str(tmp / "out"), "--no-progress"])

case("describe-config-missing", lambda tmp, w: ["model", "describe", "--config",
                                                str(tmp / "none.json")])
case("describe-config-is-a-folder", lambda tmp, w: ["model", "describe", "--config", str(tmp)])
case("describe-config-dev-zero", lambda tmp, w: ["model", "describe", "--config", "/dev/zero"])
case("describe-preset-and-config", lambda tmp, w: ["model", "describe", "--preset", "tiny",
                                                   "--config", cfg_json(tmp, {})])
case("describe-unknown-preset", lambda tmp, w: ["model", "describe", "--preset", "gpt5"])

# --- --set and flags --------------------------------------------------------------------

BAD_SETS = [
    "model.n_layers", "=4", "model.n_layerz=4", "modle.n_layers=4", "n_layers=4",
    "model.n_layers=four", "model.n_layers=4.0", "model.n_layers=1e3", "model.d_model=",
    "model.init_std=abc", "model.init_std=nan", "model.init_std=inf", "model.init_std=-inf",
    "model.final_norm=maybe", "model.norm=None", "model.vocab_size=null", "model.n_layers=0",
    "model.n_layers=2000", "model.n_heads=0", "model.d_model=-1", "train.lr=1e38",
    "train.lr=-1", "train.lr=0", "train.steps=0", "train.warmup_steps=-1",
    "train.beta2=0", "model.rope_theta=0", "model.norm_eps=-1e-5", "data.val_fraction=0",
    "data.tokenizer=words", "train.keep_ckpts=0", "model.position=alibi",
]
for _i, _set in enumerate(BAD_SETS):
    case(f"describe-set-{_i}-{_set}", lambda tmp, w, s=_set: ["model", "describe", "--preset",
                                                                "tiny", "--set", s])
for _set in ["model.vocab_size=1000000000", "model.d_model=1048576", "model.n_layers=1024",
             "model.context_len=1000000000"]:
    case(f"describe-check-memory-{_set}",
         lambda tmp, w, s=_set: ["model", "describe", "--check", "--set", "model.d_model=4096",
                                 "--set", "model.position=learned", "--set", s,
                                 "--set", "train.seq_len=8"])
case("describe-tokens-zero", lambda tmp, w: ["model", "describe", "--tokens", "0"])
case("describe-preset-empty", lambda tmp, w: ["model", "describe", "--preset", ""])
case("describe-config-empty-path", lambda tmp, w: ["model", "describe", "--config", ""])
case("describe-config-folder", lambda tmp, w: ["model", "describe", "--config", str(tmp)])
case("describe-preset-and-empty-config", lambda tmp, w: ["model", "describe", "--preset",
                                                          "tiny", "--config", ""])
for _extra in ([], ["--check"]):  # learned positions end at context_len (256 in course)
    case(f"describe-tokens-past-learned-positions{''.join(_extra)}",
         lambda tmp, w, e=_extra: ["model", "describe", "--tokens", "300", "--set",
                                   "model.position=learned", *e])
case("describe-tokens-huge", lambda tmp, w: ["model", "describe", "--tokens", "100000"])
case("describe-no-action", lambda tmp, w: ["model"])
case("experiment-no-name", lambda tmp, w: ["experiment"])
case("unknown-command", lambda tmp, w: ["trian"])
case("no-command", lambda tmp, w: [])


def train_argv(tmp: Path, *extra: str) -> list[str]:
    return ["train", "--preset", "tiny", "--corpus", TEXT, "--out", str(tmp / "out"),
            "--no-progress", *extra]


BAD_TRAIN_FLAGS = [
    ["--steps", "many"], ["--steps", "-5"], ["--steps", "0"], ["--max-steps", "0"],
    ["--max-steps", "-1"], ["--tokenizer", "words"], ["--device", "tpu"], ["--threads", "-1"],
    ["--seed", "-1"], ["--seed", "x"], ["--resume", "--overwrite"], ["--frobnicate"],
    ["--set", "train.batch_size=1000000000"], ["--set", "train.batch_size=4000000000"],
    ["--set", "train.seq_len=1000000", "--set", "model.context_len=1000000"],
    ["--set", "train.lr=11"], ["--set", "train.lr=1e300", "--set", "train.warmup_steps=5"],
    ["--set", "train.grad_accum=1000000"],
]
for _flags in BAD_TRAIN_FLAGS:
    case("train-flags-" + "_".join(_flags), lambda tmp, w, f=_flags: train_argv(tmp, *f))
case("train-diverges", lambda tmp, w: train_argv(tmp, "--set", "model.init_std=1e30",
                                                 "--steps", "3"), code=3)
case("train-out-is-a-file",
     lambda tmp, w: ["train", "--preset", "tiny", "--corpus", TEXT, "--out", text_file(tmp, "x")])
case("train-out-under-dev-null",
     lambda tmp, w: ["train", "--preset", "tiny", "--corpus", TEXT, "--out", "/dev/null/run"])
case("train-into-a-finished-run", lambda tmp, w: ["train", "--config",
                                                  str(w.run / "config.json"), "--out", str(w.run)])

# --- corpora ---------------------------------------------------------------------------


def corpus_case(make: Callable[[Path], str]) -> Build:
    return lambda tmp, w: ["train", "--preset", "tiny", "--corpus", make(tmp),
                           "--out", str(tmp / "out"), "--no-progress"]


def fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "pipe.txt")
    return str(tmp / "pipe.txt")


def folder_with(files: dict[str, bytes]) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        d = tmp / "texts"
        d.mkdir()
        for name, content in files.items():
            (d / name).write_bytes(content)
        return str(d)
    return make


def folder_named_like_a_text(tmp: Path) -> str:
    (tmp / "texts" / "sub.txt").mkdir(parents=True)
    return str(tmp / "texts")


def symlink_to(target: str) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        (tmp / "link.txt").symlink_to(target)
        return str(tmp / "link.txt")
    return make


CORPORA: dict[str, Callable[[Path], str]] = {
    "dev-zero": lambda tmp: "/dev/zero",
    "dev-null": lambda tmp: "/dev/null",
    "dev-urandom": lambda tmp: "/dev/urandom",
    "fifo": fifo,
    "symlink-to-dev-zero": symlink_to("/dev/zero"),
    "missing": lambda tmp: str(tmp / "nope.txt"),
    "name-typo": lambda tmp: "shakespear",
    "empty-file": lambda tmp: text_file(tmp, "", "e.txt"),
    "whitespace": lambda tmp: text_file(tmp, " \n\t\n", "w.txt"),
    "binary": lambda tmp: text_file(tmp, b"\x00\xff" * 100, "b.txt"),
    "not-utf8": lambda tmp: text_file(tmp, b"caf\xe9 " * 100, "l.txt"),
    "too-short": lambda tmp: text_file(tmp, "ab" * 10, "s.txt"),
    "empty-folder": folder_with({}),
    "folder-without-txt": folder_with({"a.md": b"# hello"}),
    "folder-with-empty-txt": folder_with({"a.txt": b"hello " * 200, "b.txt": b""}),
    "folder-with-binary-txt": folder_with({"a.txt": b"\x00" * 50}),
    "whitespace-100kb": lambda tmp: text_file(tmp, " \n\t" * 34_000, "w.txt"),
    "folder-holding-a-folder-named-sub-txt": folder_named_like_a_text,
}
for _name, _make in CORPORA.items():
    case(f"corpus-{_name}", corpus_case(_make))

# --- run directories: generate, next-token, probe run ----------------------------------

BROKEN_RUNS: dict[str, Callable[[Path, World], str]] = {
    "missing": lambda tmp, w: str(tmp / "no-run"),
    "is-a-file": lambda tmp, w: text_file(tmp, "x", "run"),
    "empty-folder": lambda tmp, w: (tmp / "empty").mkdir() or str(tmp / "empty"),
    "no-config": lambda tmp, w: run_copy(tmp, w, remove("config.json")),
    "config-garbage": lambda tmp, w: run_copy(tmp, w, write("config.json", "{{{")),
    "config-nested": lambda tmp, w: run_copy(tmp, w, write("config.json", NESTED)),
    "config-bad-field": lambda tmp, w: run_copy(tmp, w, edit_config(norm="batchnorm")),
    "config-other-shape": lambda tmp, w: run_copy(tmp, w, edit_config(d_model=64)),
    "config-other-vocab": lambda tmp, w: run_copy(tmp, w, edit_config(vocab_size=99)),
    "config-other-depth": lambda tmp, w: run_copy(tmp, w, edit_config(n_layers=3)),
    "config-huge-vocab": lambda tmp, w: run_copy(tmp, w, edit_config(vocab_size=10**12)),
    "no-weights": lambda tmp, w: run_copy(tmp, w, remove("model.safetensors")),
    "weights-garbage": lambda tmp, w: run_copy(tmp, w, write("model.safetensors", b"garbage")),
    "weights-empty": lambda tmp, w: run_copy(tmp, w, write("model.safetensors", b"")),
    "weights-truncated": lambda tmp, w: run_copy(
        tmp, w, write("model.safetensors", (w.run / "model.safetensors").read_bytes()[:500])),
    "tokenizer-garbage": lambda tmp, w: run_copy(tmp, w, write("tokenizer.json", "not json")),
    "tokenizer-chars-int": lambda tmp, w: run_copy(
        tmp, w, write("tokenizer.json", '{"kind": "char", "chars": 5}')),
    "tokenizer-chars-ints": lambda tmp, w: run_copy(
        tmp, w, write("tokenizer.json", '{"kind": "char", "chars": [1, 2, 3]}')),
    "tokenizer-chars-missing": lambda tmp, w: run_copy(
        tmp, w, write("tokenizer.json", '{"kind": "char"}')),
    "tokenizer-chars-duplicate": lambda tmp, w: run_copy(
        tmp, w, write("tokenizer.json", '{"kind": "char", "chars": ["a", "a"]}')),
    "tokenizer-bpe-garbage": lambda tmp, w: run_copy(
        tmp, w, write("tokenizer.json", '{"kind": "bpe", "model": 3}')),
    "weights-nan": lambda tmp, w: run_copy(tmp, w, weights_times(float("nan"))),
    "weights-overflow-the-logits": lambda tmp, w: run_copy(tmp, w, weights_times(
        1e30, only=("final_norm.weight",), then=("embed_tokens.weight", 1e10))),
}
for _name, _make in BROKEN_RUNS.items():
    case(f"generate-run-{_name}",
         lambda tmp, w, m=_make: ["generate", "--run", m(tmp, w), "--prompt", "RO", "--tokens", "2"])
    case(f"next-token-run-{_name}",
         lambda tmp, w, m=_make: ["next-token", "--run", m(tmp, w), "--prompt", "RO"])
for _name in ("missing", "config-other-shape", "weights-garbage", "tokenizer-chars-int",
              "weights-nan", "weights-overflow-the-logits"):
    case(f"probe-run-{_name}",
         lambda tmp, w, m=BROKEN_RUNS[_name]: ["probe", "run", m(tmp, w), "--prompt", "RO"])
_MISSING = [d for d, have in (("cuda", torch.cuda.is_available()),
                              ("mps", torch.backends.mps.is_available())) if not have]
for _dev in ["tpu", *_MISSING]:  # one torch has never heard of; those this machine lacks
    case(f"probe-run-device-{_dev}", lambda tmp, w, d=_dev: ["probe", "run", str(w.run),
                                                             "--prompt", "RO", "--device", d])
for _dev in _MISSING:
    case(f"generate-device-{_dev}", lambda tmp, w, d=_dev: ["generate", "--run", str(w.run),
                                                            "--prompt", "RO", "--device", d])

BAD_GENERATE = [
    ["--tokens", "10000000"], ["--tokens", "-1"], ["--temperature", "nan"],
    ["--temperature", "inf"], ["--temperature", "0"], ["--temperature", "-1"],
    ["--top-k", "0"], ["--top-k", "-3"], ["--device", "tpu"], ["--prompt", "\u2603\u2603"],
    ["--prompt", ""], ["--seed", "x"],
]
for _flags in BAD_GENERATE:
    case("generate-flags-" + "_".join(_flags),
         lambda tmp, w, f=_flags: ["generate", "--run", str(w.run), "--tokens", "2", "--prompt",
                                   "RO", *f])
for _ids in ["a,b", "99999", "-1", ",,", "1;2", "1e3"]:
    case(f"generate-prompt-ids-{_ids}",
         lambda tmp, w, i=_ids: ["generate", "--run", str(w.run), "--prompt-ids", i])
case("generate-prompt-and-ids", lambda tmp, w: ["generate", "--run", str(w.run), "--prompt", "R",
                                                "--prompt-ids", "1"])
case("next-token-show-zero", lambda tmp, w: ["next-token", "--run", str(w.run), "--prompt", "RO",
                                             "--show", "0"])

# --- checkpoints: train --resume -------------------------------------------------------


def resume_argv(run: str) -> list[str]:
    return ["train", "--config", str(Path(run) / "config.json"), "--out", run, "--resume",
            "--no-progress"]


BROKEN_CHECKPOINTS: dict[str, Callable[[Path], None]] = {
    "state-garbage": every_checkpoint("state.pt", b"not a pickle"),
    "state-empty": every_checkpoint("state.pt", b""),
    "weights-garbage": every_checkpoint("model.safetensors", b"garbage"),
    "state-missing": lambda run: [p.joinpath("state.pt").unlink()
                                  for p in (run / "checkpoints").iterdir()],
    "state-other-step": lambda run: [torch.save({"step": 99}, p / "state.pt")
                                     for p in (run / "checkpoints").iterdir()],
    "state-a-list": lambda run: [torch.save([1, 2], p / "state.pt")
                                 for p in (run / "checkpoints").iterdir()],
    "no-checkpoints-but-weights": lambda run: shutil.rmtree(run / "checkpoints"),
    "checkpoints-is-a-file": lambda run: (shutil.rmtree(run / "checkpoints"),
                                          (run / "checkpoints").write_text("x")),
    "other-shape": edit_config(d_model=64),
}
for _name, _mutate in BROKEN_CHECKPOINTS.items():
    case(f"resume-{_name}", lambda tmp, w, m=_mutate: resume_argv(run_copy(tmp, w, m)))
# a .lock that is a symlink to the corpus (a protected file): refused, the corpus unchanged
def lock_to_corpus(run: Path) -> None:
    (run / ".lock").symlink_to(TEXT)


case("lock-symlink-resume", lambda tmp, w: resume_argv(run_copy(tmp, w, lock_to_corpus)))
case("lock-symlink-overwrite", lambda tmp, w: train_argv(tmp, "--overwrite", "--out",
                                                         run_copy(tmp, w, lock_to_corpus)))
case("lock-symlink-hf-import-force", lambda tmp, w: [
    "hf", "import", str(w.hf), "--out", run_copy(tmp, w, lock_to_corpus), "--force"])
# --overwrite/--force never delete what depthlab did not write, nor the command's own text
def note_in(rel: str) -> Callable[[Path], None]:
    def mutate(run: Path) -> None:
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text("mine")
    return mutate


for _rel in ("checkpoints/step_0000002/notes.txt", ".tmp-work/draft.txt", ".notes.tmp"):
    case(f"overwrite-user-file-{_rel}", lambda tmp, w, r=_rel: train_argv(
        tmp, "--overwrite", "--out", run_copy(tmp, w, note_in(r))))
    case(f"hf-import-force-user-file-{_rel}", lambda tmp, w, r=_rel: [
        "hf", "import", str(w.hf), "--out", run_copy(tmp, w, note_in(r)), "--force"])


def corpus_inside(tmp: Path, w: World) -> list[str]:
    run = Path(run_copy(tmp, w, lambda r: None))
    text = run / "checkpoints" / "step_0000002" / "text.txt"
    shutil.copyfile(TEXT, text)
    (tmp / "link").symlink_to(run)
    return ["train", "--preset", "tiny", "--corpus", str(text), "--out",
            str(tmp / "link" / "checkpoints" / ".."), "--overwrite", "--no-progress"]


case("overwrite-own-corpus-inside-out", corpus_inside)
# the corpus's identity on resume comes from the checkpoint and the tokenizer, not an
# editable field: a malformed, removed or re-aimed corpus.sha256 is refused in one line
def corpus_record(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def mutate(run: Path) -> None:
        record = json.loads((run / "config.json").read_text())
        change(record)
        (run / "config.json").write_text(json.dumps(record))
    return mutate


for _name, _change in {
        "hash-5": lambda r: r["corpus"].update(sha256="5"),
        "hash-removed": lambda r: r["corpus"].pop("sha256"),
        "hash-a-list": lambda r: r["corpus"].update(sha256=[1]),
        "hash-of-another-text": lambda r: r["corpus"].update(sha256="0" * 64),
        "corpus-not-an-object": lambda r: r.update(corpus="tiny")}.items():
    case(f"resume-corpus-{_name}", lambda tmp, w, c=_change: resume_argv(
        run_copy(tmp, w, corpus_record(c))))
case("resume-tokenizer-reordered", lambda tmp, w: resume_argv(run_copy(tmp, w, write(
    "tokenizer.json", json.dumps({"kind": "char", "chars": sorted(
        json.loads((w.run / "tokenizer.json").read_text())["chars"], reverse=True)})))))
case("resume-other-schedule",
     lambda tmp, w: [*resume_argv(run_copy(tmp, w, lambda r: None)), "--steps", "10"])
case("resume-other-seed",
     lambda tmp, w: [*resume_argv(run_copy(tmp, w, lambda r: None)), "--seed", "7"])


def non_empty_out(tmp: Path, *extra: str) -> list[str]:
    (tmp / "out").mkdir()
    text_file(tmp / "out", "mine", "notes.txt")
    return train_argv(tmp, *extra)


case("resume-folder-without-config", lambda tmp, w: non_empty_out(tmp, "--resume"))
case("resume-nothing-there", lambda tmp, w: train_argv(tmp, "--resume"))
case("train-into-a-non-empty-folder", lambda tmp, w: non_empty_out(tmp))

# --- Hugging Face folders: hf import and export ----------------------------------------


def index_to(file: object) -> Callable[[Path], None]:
    """A shard index that maps every tensor of the folder's model.safetensors to `file`."""
    def mutate(folder: Path) -> None:
        from safetensors import safe_open
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            names = list(f.keys())
        write("model.safetensors.index.json",
              json.dumps({"weight_map": dict.fromkeys(names, file)}))(folder)
    return mutate


def hf_import(folder: str, tmp: Path, *extra: str) -> list[str]:
    return ["hf", "import", folder, "--out", str(tmp / "imported"), *extra]


BAD_HF: dict[str, Callable[[Path], str]] = {
    "missing": lambda tmp: str(tmp / "nope"),
    "is-a-file": lambda tmp: text_file(tmp, "x", "hf"),
    "empty": lambda tmp: (tmp / "hf").mkdir() or str(tmp / "hf"),
    "config-garbage": lambda tmp: hf_dir(tmp, mutate=write("config.json", "nope")),
    "config-nested": lambda tmp: hf_dir(tmp, mutate=write("config.json", NESTED)),
    "architecture": lambda tmp: hf_dir(tmp, {"architectures": ["MistralForCausalLM"]}),
    "model-type-mismatch": lambda tmp: hf_dir(tmp, {"model_type": "qwen2"}),
    "rope-llama3": lambda tmp: hf_dir(tmp, {"rope_parameters": {"rope_type": "llama3",
                                                                "rope_theta": 5e5}}),
    "rope-both-llama3-scaling": lambda tmp: hf_dir(
        tmp, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
    "rope-both-yarn-scaling": lambda tmp: hf_dir(tmp, {"rope_scaling": {"type": "yarn"}}),
    "rope-params-not-object": lambda tmp: hf_dir(tmp, {"rope_parameters": 3}),
    "rope-theta-text": lambda tmp: hf_dir(tmp, {"rope_parameters": {"rope_type": "default",
                                                                    "rope_theta": "big"}}),
    "hidden-act": lambda tmp: hf_dir(tmp, {"hidden_act": "gelu"}),
    "context-2^40": lambda tmp: hf_dir(tmp, {"max_position_embeddings": 2**40}),
    "context-2^64": lambda tmp: hf_dir(tmp, {"max_position_embeddings": 2**64}),
    "hidden-size-text": lambda tmp: hf_dir(tmp, {"hidden_size": "32"}, weights=False),
    "hidden-size-negative": lambda tmp: hf_dir(tmp, {"hidden_size": -32}, weights=False),
    "layers-missing": lambda tmp: hf_dir(tmp, {"num_hidden_layers": ...}, weights=False),
    "no-weights": lambda tmp: hf_dir(tmp, weights=False),
    "weights-garbage": lambda tmp: hf_dir(tmp, mutate=write("model.safetensors", b"junk")),
    "weights-other-shape": lambda tmp: hf_dir(tmp, {"hidden_size": 64}),
    "index-missing-shard": lambda tmp: hf_dir(tmp, weights=False, mutate=write(
        "model.safetensors.index.json", json.dumps({"weight_map": {"a": "shard-1.safetensors"}}))),
    "index-garbage": lambda tmp: hf_dir(tmp, weights=False, mutate=write(
        "model.safetensors.index.json", "[")),
    # shards outside the folder: the real weights, reached through a path (read, without
    # the rule, as a working checkpoint), an absolute path, a name that is no shard
    **{f"index-shard-{i}": lambda tmp, f=file: hf_dir(tmp, mutate=index_to(f)) for i, file in
       enumerate(["../hf/model.safetensors", "./model.safetensors", "sub/../model.safetensors",
                  "/etc/passwd", "..", "model.safetensors\\..", "config.json", 7])},
}
for _name, _make in BAD_HF.items():
    case(f"hf-import-{_name}", lambda tmp, w, m=_make: hf_import(m(tmp), tmp))
case("hf-import-out-exists", lambda tmp, w: ["hf", "import", str(w.hf), "--out", str(w.run)])
case("hf-import-out-is-file",
     lambda tmp, w: ["hf", "import", str(w.hf), "--out", text_file(tmp, "x", "f")])
case("hf-export-missing-run", lambda tmp, w: ["hf", "export", str(tmp / "no"), "--out",
                                              str(tmp / "o")])
case("hf-export-broken-run", lambda tmp, w: ["hf", "export", run_copy(
    tmp, w, write("model.safetensors", b"x")), "--out", str(tmp / "o")])
case("hf-export-out-exists", lambda tmp, w: ["hf", "export", str(w.run), "--out", str(w.hf)])
case("hf-probe-missing", lambda tmp, w: ["hf", "probe", str(tmp / "no"), "--ids", "1,2"])

# --- probe and anatomy arguments -------------------------------------------------------

BAD_PROBES = [
    ["gradflow", "--depth", "0"], ["gradflow", "--depth", "100000"], ["gradflow", "--depth", "x"],
    ["gradflow", "--gain", "-1"], ["gradflow", "--gain", "nan"], ["gradflow", "--gain", "inf"],
    ["gradflow", "--gain", "1e308"], ["gradflow", "--plot", "/dev/null/x.png"],
    ["gradflow", "--plot", "chart.gif"], ["collapse", "--depth", "0"],
    ["gradflow", "--residual", "sideways"], ["gradflow", "--residual", "True"],
    ["gradflow", "--norm", "layernorm"], ["collapse", "--norm"], ["gradflow", "--scale-writes"],
    ["collapse", "--residual", "rezero", "--scale-writes"], ["gradflow", "--sweep", "--norm", "pre"],
    ["collapse", "--depth", "-3"], ["collapse", "--gain", "nan"],
    ["growth", "--writes", "0"], ["growth", "--writes", "100000000"],
    ["growth", "--samples", "0"], ["growth", "--samples", "100000000"],
    ["growth", "--real", "--tokens", "0"], ["growth", "--real", "--set", "model.n_layers=0"],
    ["growth", "--real", "--set", "model.vocab_size=1000000000000"],
    ["paths", "--depth", "0"], ["paths", "--depth", "100000"], ["paths", "--scale", "nan"],
    ["gradflow", "--gain", "1e-320"], ["collapse", "--gain", "1e-320"],
    ["gradflow", "--gain", "1e-250", "--residual", "plain", "--json"],
    ["paths", "--x0", "inf"], ["norms", "abc"], ["norms", "nan", "1"], ["norms", "1", "inf"],
    ["norms", "--eps", "-1", "3", "4"], ["norms"], ["unknown-probe"],
]
for _argv in BAD_PROBES:
    case("probe-" + "_".join(_argv), lambda tmp, w, a=_argv: ["probe", *a])

BAD_ANATOMY = [
    ["no-such-config"], ["--tokens", "0"], ["--tokens", "100000000"], ["--preset", "gpt5"],
]
for _argv in BAD_ANATOMY:
    case("anatomy-" + "_".join(_argv), lambda tmp, w, a=_argv: ["anatomy", *a])
case("anatomy-garbage-config", lambda tmp, w: ["anatomy", text_file(tmp, "{oops")])
case("anatomy-nested-config", lambda tmp, w: ["anatomy", text_file(tmp, NESTED)])

# --- experiments -----------------------------------------------------------------------

for _argv in (["no-such-experiment"], ["residual", "--budget", "huge"],
              ["residual", "--seeds", "0"], ["residual", "--seeds", "99"],
              ["residual", "--seeds", "1,x"], ["residual", "--seeds", "3-1"],
              ["residual", "--seeds", "1,1"], ["residual", "--seeds", "0-10"],
              ["residual", "--budget", "micro", "--corpus", "/dev/zero"]):
    case("experiment-" + "_".join(_argv),
         lambda tmp, w, a=_argv: ["experiment", *a, "--out", str(tmp / "exp"), "--no-progress"])
case("experiment-out-is-file",
     lambda tmp, w: ["experiment", "residual", "--budget", "micro", "--out",
                     text_file(tmp, "x", "f")])

# --- optimizer and schedule fields out of their ranges (--set and config files) ---------

BAD_OPTIMIZER = [
    "train.beta1=1", "train.beta1=-0.01", "train.beta1=1.000001", "train.beta2=1.0",
    "train.beta2=-0.5", "train.beta2=7", "train.min_lr_ratio=1.01", "train.min_lr_ratio=-0.5",
    "train.min_lr_ratio=3", "train.grad_clip=-0.1", "train.weight_decay=-1e-9",
]
for _set in BAD_OPTIMIZER:
    case(f"optimizer-set-{_set}", lambda tmp, w, s=_set: train_argv(tmp, "--set", s))
case("optimizer-decay-times-lr-reaches-one",
     lambda tmp, w: train_argv(tmp, "--set", "train.lr=0.5", "--set", "train.weight_decay=2"))
for _name, _train in {"beta1": {"beta1": 2.5}, "beta2": {"beta2": 0},
                      "min-lr-ratio": {"min_lr_ratio": 10},
                      "decay": {"lr": 0.01, "weight_decay": 150}}.items():
    case(f"optimizer-config-{_name}",
         lambda tmp, w, t=_train: ["model", "describe", "--config", cfg_json(tmp, {"train": t})])

# --- wrong JSON types in config files: a string is not a number, nor "yes" a boolean ----

WRONG_TYPES = {
    "steps-as-text": {"train": {"steps": "600"}}, "lr-as-text": {"train": {"lr": "3e-3"}},
    "fraction-as-text": {"data": {"val_fraction": "0.05"}},
    "bool-as-text-true": {"model": {"qk_norm": "true"}},
    "bool-as-text-on": {"model": {"attn_gate": "on"}},
    "bool-as-number": {"train": {"compile": 1}}, "bool-as-zero": {"model": {"bias": 0}},
    "number-as-bool": {"train": {"lr": False}}, "number-as-list": {"train": {"lr": [0.001]}},
    "number-as-object": {"model": {"init_std": {"value": 0.02}}},
    "null-as-text": {"model": {"head_dim": "none"}}, "int-as-bool": {"train": {"seed": False}},
    "text-as-number": {"model": {"norm": 1}},
}
for _name, _raw in WRONG_TYPES.items():
    case(f"types-describe-{_name}",
         lambda tmp, w, r=_raw: ["model", "describe", "--config", cfg_json(tmp, r)])
    case(f"types-train-{_name}", lambda tmp, w, r=_raw: ["train", "--config", cfg_json(tmp, r),
                                                         "--corpus", TEXT, "--out",
                                                         str(tmp / "out"), "--no-progress"])
case("types-run-config-tie-as-text",
     lambda tmp, w: ["generate", "--run", run_copy(tmp, w, edit_config(tie_embeddings="no")),
                     "--prompt", "RO", "--tokens", "1"])
for _name, _change in {"tie-as-text": {"tie_word_embeddings": "yes"},
                       "tie-as-number": {"tie_word_embeddings": 1},
                       "bias-as-text": {"attention_bias": "false"},
                       "eps-as-text": {"rms_norm_eps": "1e-5"},
                       "eps-as-bool": {"rms_norm_eps": True}}.items():
    case(f"types-hf-{_name}", lambda tmp, w, c=_change: hf_import(hf_dir(tmp, c), tmp))

# --- corpora too small for the split, the context and the tokenizer -------------------

TINY_CORPORA: dict[str, tuple[str | bytes, list[str]]] = {
    "one-character": ("x", []),
    "one-below-the-char-minimum": ("q" * 35, []),  # tiny: seq_len 32, val 0.1 -> 36
    "a-few-han-characters": ("天地玄黄宇宙洪荒", []),
    "one-emoji": ("\U0001f600", []),
    "bpe-on-two-hundred-bytes": ("to be or not to be " * 10, ["--tokenizer", "bpe", "--set",
                                                              "train.seq_len=64"]),
    "longer-context": ("abcdefghij" * 8, ["--set", "model.context_len=128",
                                          "--set", "train.seq_len=100"]),
    "split-leaves-one-val-token": ("word " * 20, ["--set", "data.val_fraction=0.01",
                                                  "--set", "train.seq_len=16"]),
}
for _name, (_text, _extra) in TINY_CORPORA.items():
    case(f"tiny-corpus-{_name}",
         lambda tmp, w, t=_text, e=_extra: ["train", "--preset", "tiny", "--corpus",
                                            text_file(tmp, t, "t.txt"), "--out",
                                            str(tmp / "out"), "--no-progress", *e])
case("tiny-corpus-folder-of-crumbs",
     lambda tmp, w: ["train", "--preset", "tiny", "--corpus",
                     folder_with({"a.txt": b"ab", "b.txt": b"cd", "c.txt": b"e"})(tmp),
                     "--out", str(tmp / "out"), "--no-progress"])

# --- thread counts past the machine's cores, or below zero ----------------------------

for _n in ("100000", "1048576", "-2"):
    case(f"threads-train-{_n}", lambda tmp, w, n=_n: train_argv(tmp, "--threads", n))
    case(f"threads-generate-{_n}", lambda tmp, w, n=_n: ["generate", "--run", str(w.run),
                                                         "--prompt", "RO", "--threads", n])
case("threads-config-file", lambda tmp, w: [
    "train", "--config", cfg_json(tmp, {"train": {"threads": 65536}}), "--corpus", TEXT,
    "--out", str(tmp / "out"), "--no-progress"])
case("threads-next-token", lambda tmp, w: ["next-token", "--run", str(w.run), "--prompt", "R",
                                           "--threads", "300000"])
case("threads-probe-run", lambda tmp, w: ["probe", "run", str(w.run), "--prompt", "RO",
                                          "--threads", "99999"])
case("threads-hf-probe", lambda tmp, w: ["hf", "probe", str(w.run), "--ids", "1,2",
                                         "--threads", "-7"])
case("threads-hf-export", lambda tmp, w: ["hf", "export", str(w.run), "--out", str(tmp / "o"),
                                          "--threads", "123456"])
case("threads-hf-import", lambda tmp, w: hf_import(str(w.hf), tmp, "--threads", "777777"))
case("threads-experiment", lambda tmp, w: ["experiment", "residual", "--budget", "micro",
                                           "--out", str(tmp / "exp"), "--threads", "555555"])
case("threads-serve", lambda tmp, w: ["serve", "--port", "0", "--threads", "444444"])
case("workers-serve", lambda tmp, w: ["serve", "--port", "0", "--workers", "0"])
case("workers-lab", lambda tmp, w: ["lab", "--runs", str(tmp / "runs"), "--workers", "100000"])
case("queue-serve", lambda tmp, w: ["serve", "--port", "0", "--queue", "-1"])
case("threads-lab", lambda tmp, w: ["lab", "--runs", str(tmp / "runs"), "--threads", "-3"])
case("threads-not-a-number", lambda tmp, w: ["generate", "--run", str(w.run), "--prompt", "R",
                                             "--threads", "two"])

# --- garbled tokenizer files in a Hugging Face folder (parsed before they are copied) ----

GARBLED_TOKENIZERS: dict[str, str | bytes] = {
    "not-json": "tokenizer, version 1",
    "truncated": '{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0',
    "wrong-model-type": '{"version": "1.0", "model": {"type": "Sentencepiece"}}',
    "bpe-without-vocab": '{"version": "1.0", "model": {"type": "BPE", "merges": []}}',
    "depthlab-char-file": '{"kind": "char", "chars": ["a", "b"]}',
    "binary": b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
    "json-list": "[1, 2, 3]",
    "more-tokens-than-the-model": json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(80)},
                  "unk_token": "w0"}}),
}
for _name, _content in GARBLED_TOKENIZERS.items():
    case(f"hf-import-tokenizer-{_name}",
         lambda tmp, w, c=_content: hf_import(hf_dir(tmp, mutate=write("tokenizer.json", c)), tmp))

# --- malformed id lists -----------------------------------------------------------------

for _ids in ["4,,5", "6,", ",7", "8,,,9", "1 2", "+3", "\u0661\u0662", "0x10", " , ", "2.0"]:
    case(f"ids-generate-{_ids}", lambda tmp, w, i=_ids: ["generate", "--run", str(w.run),
                                                         "--prompt-ids", i, "--tokens", "1"])
case("ids-next-token", lambda tmp, w: ["next-token", "--run", str(w.run), "--prompt-ids", "3,,"])
case("ids-probe-run", lambda tmp, w: ["probe", "run", str(w.run), "--ids", "1,,3"])
case("ids-hf-probe", lambda tmp, w: ["hf", "probe", str(w.run), "--ids", "5,-1"])

# --- writes that fail: /proc, a name past the file system's limit, a read-only folder ----

case("write-hf-export-proc", lambda tmp, w: ["hf", "export", str(w.run), "--out",
                                             "/proc/self/hf-export"])
case("write-hf-import-proc", lambda tmp, w: ["hf", "import", str(w.hf), "--out",
                                             "/proc/self/imported"])
case("write-plot-proc", lambda tmp, w: ["probe", "gradflow", "--depth", "2", "--plot",
                                        "/proc/self/gradflow.png"])
case("write-plot-name-too-long", lambda tmp, w: ["probe", "gradflow", "--depth", "2", "--plot",
                                                 str(tmp / ("g" * 300 + ".png"))])
case("write-experiment-proc", lambda tmp, w: ["experiment", "residual", "--budget", "micro",
                                              "--out", "/proc/self/experiments"])


def read_only_folder(tmp: Path) -> Path:
    folder = tmp / "readonly"
    folder.mkdir()
    folder.chmod(0o500)
    return folder


if os.geteuid() != 0:  # root writes through permissions: the /proc cases stand for it there
    case("write-hf-export-read-only", lambda tmp, w: [
        "hf", "export", str(w.run), "--out", str(read_only_folder(tmp) / "hf")])
    case("write-plot-read-only", lambda tmp, w: [
        "probe", "gradflow", "--depth", "2", "--plot", str(read_only_folder(tmp) / "g.png")])


def test_there_are_enough_cases():
    assert len(CASES) >= 150, len(CASES)
    assert len({name for name, _, _ in CASES}) == len(CASES)


def run_in_process(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def check(code: int, err: str, expected: int, argv: list[str]) -> None:
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert code == expected, f"exit {code} for {argv}: {err}"
    assert len(lines) == 1, f"{len(lines)} stderr lines for {argv}: {err}"
    assert "error" in lines[0]


@pytest.mark.parametrize("name, build, expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_one_line(world, tmp_path, capsys, name, build, expected):
    argv = build(tmp_path, world)
    before = world.protected()
    code, err = run_in_process(argv, capsys)
    check(code, err, expected, argv)
    assert world.protected() == before


SUBPROCESS_CASES = ["train-config-nested-100000", "corpus-dev-zero", "generate-flags---temperature_nan",
                    "resume-state-garbage", "hf-import-rope-both-llama3-scaling",
                    "train-flags---set_train.batch_size=1000000000", "threads-train-1048576",
                    "write-hf-export-proc", "tiny-corpus-one-character"]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_the_real_entry_point_agrees(world, tmp_path, name):
    _, build, expected = next(c for c in CASES if c[0] == name)
    argv = build(tmp_path, world)
    before = world.protected()
    proc = subprocess.run([sys.executable, "-m", "depthlab", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "DEPTHLAB_CACHE": str(world.root / "cache")})
    check(proc.returncode, proc.stderr, expected, argv)
    assert world.protected() == before


# --- a full disk: a file-size limit (ulimit -f) through the real entry point ----------------
# SIGXFSZ ignored (as Python itself does), so a write past the limit fails with EFBIG: the
# tiny run's 117 KB weights and 250 KB state.pt do not fit under 100 KB, the small Llama's
# weights not under 10 KB (its config.json does).

FULL_DISK: dict[str, tuple[Build, int]] = {
    "hf-export": (lambda tmp, w: ["hf", "export", str(w.run), "--out", str(tmp / "o")],
                  100_000),
    "hf-import": (lambda tmp, w: hf_import(str(w.hf), tmp), 10_000),
    "train": (lambda tmp, w: train_argv(tmp, "--steps", "2", "--set", "train.ckpt_every=1"),
              100_000),
    "resume": (lambda tmp, w: resume_argv(run_copy(  # from step 2: step 4 is written again
        tmp, w, lambda r: shutil.rmtree(r / "checkpoints" / "step_0000004"))), 100_000),
}


def _file_size_limit(limit: int) -> Callable[[], None]:
    def pre() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FULL_DISK))
def test_a_full_disk_is_one_line(world, tmp_path, name):
    build, limit = FULL_DISK[name]
    argv = build(tmp_path, world)
    before = world.protected()
    proc = subprocess.run([sys.executable, "-m", "depthlab", *argv], cwd=REPO, text=True,
                          capture_output=True, timeout=300, preexec_fn=_file_size_limit(limit),
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "DEPTHLAB_CACHE": str(world.root / "cache")})
    check(proc.returncode, proc.stderr, 2, argv)
    assert "cannot write (File too large)" in proc.stderr
    assert world.protected() == before


@pytest.mark.parametrize("corpus", ["/nonexistent/corpus.txt", "hlm", "/dev/zero"])
def test_a_refused_corpus_leaves_no_experiment_behind(tmp_path, capsys, corpus):
    """The corpus is read before the experiment starts: no folder, no status.json saying
    'failed' for an experiment that never ran."""
    code, err = run_in_process(["experiment", "norm-type", "--budget", "micro", "--corpus",
                                corpus, "--out", str(tmp_path / "exp"), "--no-progress"], capsys)
    check(code, err, 2, [])
    assert not (tmp_path / "exp").exists()
