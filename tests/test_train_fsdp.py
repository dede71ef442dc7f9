"""train.parallel=fsdp under torchrun on CPU/gloo: it follows one process and ddp at the
same global batch, its DCP checkpoints resume on another world size, every reader of a
run reads them, and what it cannot run is one line before anything is written."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from depthlab.metrics import read_metrics

TEXT = str(Path(__file__).parent / "data" / "tiny_shakespeare.txt")
REPO = Path(__file__).parent.parent
# the course model at a small batch, so that 20 steps of three launches take seconds
SMALL = ["--set", "train.batch_size=4", "--set", "train.seq_len=32", "--set", "train.eval_tokens=256",
         "--set", "train.log_every=1", "--set", "train.warmup_steps=2"]
HYBRID = ["--set", "model.mixer=gated_deltanet", "--set", "model.layer_pattern=LA",
          "--set", "model.x0_mix=true", "--set", "model.unet_skips=true"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "DEPTHLAB_CACHE": str(tmp / "cache"),
            "PYTHONPATH": str(REPO)}


def depthlab(tmp: Path, args: list[str], world: int = 0) -> subprocess.CompletedProcess:
    """`depthlab ARGS` in one process (world 0: no torchrun) or under torchrun."""
    launcher = [sys.executable, "-m", "depthlab"]
    if world:
        launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
                    "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "depthlab"]
    return subprocess.run([*launcher, *args], cwd=REPO, env=env(tmp), capture_output=True,
                          text=True, timeout=300)


def train(tmp: Path, out: str, steps: int, extra: list[str], world: int = 0,
          parallel: str = "ddp", code: int = 0) -> Path:
    args = ["train", "--preset", "course", "--corpus", TEXT, "--steps", str(steps), "--no-progress",
            *SMALL, "--set", f"train.parallel={parallel}", *extra, "--out", str(tmp / out)]
    done = depthlab(tmp, args, world)
    assert done.returncode == code, done.stderr[-3000:]
    return tmp / out


def curve(run: Path, kind: str = "train", key: str = "loss") -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in read_metrics(run, kind)]


def rel_gap(a: list, b: list) -> float:
    """The largest relative difference of two curves logged at the same steps."""
    assert [s for s, _ in a] == [s for s, _ in b]
    return max(abs(x - y) / abs(y) for (_, x), (_, y) in zip(a, b, strict=True))


def close(a: list, b: list, rel: float = 1e-5) -> bool:
    """Losses: float32 sums taken in another order over 2 processes drift, over 20 steps
    of updates, to about 1e-6 of the loss (measured: 1.3e-6 for ddp against one process)."""
    return rel_gap(a, b) <= rel


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["course", "hybrid"])
def test_fsdp_follows_one_process_and_ddp(tmp_path, variant):
    extra = ["--set", "train.eval_every=10", "--set", "train.ckpt_every=10",
             "--set", "train.grad_accum=2", *(HYBRID if variant == "hybrid" else [])]
    one = train(tmp_path, "one", 20, extra)
    # the hybrid's fsdp run also recomputes its blocks in backward
    ac = ["--set", "train.activation_checkpointing=true"] if variant == "hybrid" else []
    fsdp = train(tmp_path, "fsdp", 20, [*extra, *ac], world=2, parallel="fsdp")
    for kind, key in (("train", "loss"), ("eval", "val_loss")):
        assert close(curve(fsdp, kind, key), curve(one, kind, key)), (kind, key)
    assert len(curve(fsdp)) == 20
    norms = curve(fsdp, "train", "grad_norm"), curve(one, "train", "grad_norm")
    # step 1, before any update can drift: the clip's norm is the whole gradient's (one
    # shard's would be about 1/sqrt(2) of it)
    assert rel_gap(norms[0][:1], norms[1][:1]) <= 1e-6
    if variant == "course":
        # the gradient norm is the worse conditioned: the conditioning is measured by ddp,
        # the same sums over 2 processes, and fsdp must stay as close to one process
        ddp = train(tmp_path, "ddp", 20, extra, world=2)
        for kind, key in (("train", "loss"), ("eval", "val_loss")):
            assert close(curve(fsdp, kind, key), curve(ddp, kind, key)), (kind, key)
        ddp_gap = rel_gap(curve(ddp, "train", "grad_norm"), norms[1])
        assert rel_gap(*norms) <= 3 * ddp_gap + 1e-6, (rel_gap(*norms), ddp_gap)
    else:  # ddp's gap on the course model measured 7e-4 at step 20
        assert rel_gap(*norms) <= 2e-3
    # the probes read the same model (rank 0 probes a whole copy of the shards)
    a, b = read_metrics(fsdp, "probe")[-1], read_metrics(one, "probe")[-1]
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"])
    assert (fsdp / "checkpoints" / "step_0000020" / ".metadata").is_file()
    assert not (fsdp / "model.safetensors").exists()  # its weights are the DCP folder's


@pytest.mark.slow
def test_dcp_checkpoint_resumes_at_world_2_and_1(tmp_path):
    extra = ["--set", "train.eval_every=4", "--set", "train.ckpt_every=4"]
    whole = train(tmp_path, "whole", 8, extra, world=2, parallel="fsdp")
    part = train(tmp_path, "part", 8, [*extra, "--max-steps", "4"], world=2, parallel="fsdp",
                 code=1)  # interrupted with a checkpoint: 130, which torchrun reports as 1
    assert (part / "checkpoints" / "step_0000004" / "__1_0.distcp").is_file()
    shutil.copytree(part, tmp_path / "alone")
    train(tmp_path, "part", 8, [*extra, "--resume"], world=2, parallel="fsdp")
    assert curve(part) == curve(whole)  # the same world: bit for bit
    assert curve(part, "eval", "val_loss") == curve(whole, "eval", "val_loss")
    alone = train(tmp_path, "alone", 8, [*extra, "--resume"])  # one process, no torchrun
    assert close(curve(alone), curve(whole))
    assert (alone / "model.safetensors").is_file()  # one process writes whole weights again
    # every reader of a run reads the DCP checkpoint: the same text from both runs
    gen = ["generate", "--prompt", "ROMEO:", "--tokens", "12", "--greedy", "--run"]
    a, b = depthlab(tmp_path, [*gen, str(whole)]), depthlab(tmp_path, [*gen, str(alone)])
    assert a.returncode == 0 and a.stdout == b.stdout, a.stderr


def test_fsdp_without_torchrun_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    done = depthlab(tmp_path, ["train", "--preset", "tiny", "--corpus", TEXT, "--steps", "2",
                               "--set", "train.parallel=fsdp", "--out", str(out)])
    assert done.returncode != 0
    assert "train.parallel=fsdp needs torchrun" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_bad_parallel_settings_are_one_line():
    from dataclasses import replace

    from depthlab.errors import UserError
    from depthlab.presets import get_preset
    from depthlab.train.parallel import check

    cfg = get_preset("tiny")
    fsdp = replace(cfg, train=replace(cfg.train, parallel="fsdp", batch_size=6))
    with pytest.raises(UserError, match="train.batch_size=6 must be divisible by the 4"):
        check(fsdp, 4, launched=True)
    check(fsdp, 2, launched=True)
    muon = replace(fsdp, train=replace(fsdp.train, optimizer="muon"))
    with pytest.raises(UserError, match="train.optimizer=muon with train.parallel=fsdp"):
        check(muon, 2, launched=True)
    with pytest.raises(UserError, match="needs torchrun"):
        check(fsdp, 1, launched=False)


def test_unknown_parallel_kind_names_the_field():
    from depthlab.config import ConfigError, validate
    from depthlab.presets import get_preset

    cfg = get_preset("tiny")
    from dataclasses import replace
    with pytest.raises(ConfigError, match="train.parallel"):
        validate(replace(cfg, train=replace(cfg.train, parallel="zero3")))


def test_memory_per_rank_knows_the_sharding():
    from depthlab.memory import FLOAT, per_rank
    from depthlab.presets import get_preset

    m = get_preset("gpt2").model
    one = per_rank(m, 8, 256)
    ddp = per_rank(m, 4, 256, world=2, parallel="ddp")
    fsdp2 = per_rank(m, 4, 256, world=2, parallel="fsdp")
    fsdp8 = per_rank(m, 1, 256, world=8, parallel="fsdp")
    assert ddp.weights == one.weights and ddp.optimizer == one.optimizer + FLOAT * one.params
    assert fsdp2.optimizer < one.optimizer / 2 + one.optimizer / 10  # moments and grads / 2
    assert fsdp8.weights + fsdp8.optimizer < (ddp.weights + ddp.optimizer) / 3
    assert fsdp2.activations == ddp.activations  # the same sequences per process


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo group of one process, in this process: fully_shard and DCP run as under
    torchrun, on a mesh of one."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def _sharded(seed: int = 0):
    from dataclasses import replace

    import torch

    from depthlab.model import Transformer
    from depthlab.presets import get_preset
    from depthlab.train.optim import make_optimizer
    from depthlab.train.parallel import shard

    cfg = get_preset("tiny")
    cfg = replace(cfg, model=replace(cfg.model, vocab_size=32, x0_mix=True),
                  train=replace(cfg.train, parallel="fsdp"))
    torch.manual_seed(seed)
    model = shard(Transformer(cfg.model), cfg, torch.device("cpu"))
    opt = make_optimizer(model, cfg.train)
    x = torch.randint(0, 32, (2, 8))
    model(x).float().square().mean().backward()
    opt.step()
    opt.zero_grad()
    return cfg, model, opt


def test_a_crash_while_saving_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch,
                                                                  one_process_group):
    import torch

    from depthlab.rundir import load_model, weights_source, write_config
    from depthlab.train import checkpoint as ck

    cfg, model, opt = _sharded()
    root, tmp_path = tmp_path, tmp_path / "run"
    tmp_path.mkdir()
    write_config(tmp_path, cfg)
    ck.save_sharded_checkpoint(tmp_path, 1, model, opt, 2, True)
    before = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints/step_0000001").iterdir()}

    def killed(*a, **k):
        raise OSError(28, "No space left on device", "state.pt")

    monkeypatch.setattr(torch, "save", killed)  # DCP's own writes (the optimizer's step) fail
    with pytest.raises(BaseException):  # noqa: B017 - DCP's CheckpointException
        ck.save_sharded_checkpoint(tmp_path, 2, model, opt, 2, True)
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_0000001"]
    after = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints/step_0000001").iterdir()}
    assert after == before
    # what every reader of a run calls reads it, and gets the trained weights
    assert weights_source(tmp_path) == tmp_path / "checkpoints/step_0000001"
    whole, _ = load_model(tmp_path)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    for name, t in whole.state_dict().items():
        assert torch.equal(t, full[name]), name
    # the page lists it and loads it
    from depthlab.web.realmodel import LoadedRuns, list_runs
    assert [r["name"] for r in list_runs(root)] == ["run"]
    page_model = LoadedRuns().get(tmp_path)[0]
    assert torch.equal(page_model.embed_tokens.weight, full["embed_tokens.weight"])
    # and the trainer's own reader restores model and optimizer into a fresh sharded pair
    _, fresh, fresh_opt = _sharded(seed=1)
    step1 = ck.load_checkpoint(tmp_path / "checkpoints/step_0000001", 1)
    assert step1.sharded and step1.state["parallel"] == "fsdp"
    ck.restore_sharded(fresh, fresh_opt, step1)
    again = get_model_state_dict(fresh, options=StateDictOptions(full_state_dict=True))
    assert all(torch.equal(again[k], full[k]) for k in full)


def test_fsdp_refuses_a_checkpoint_it_cannot_shard(tmp_path):
    from dataclasses import replace

    import torch

    from depthlab.errors import UserError
    from depthlab.presets import get_preset
    from depthlab.train.checkpoint import Checkpoint
    from depthlab.train.setup import check_kind

    cfg = get_preset("tiny")
    ckpt = Checkpoint(tmp_path / "step_0000004", 4, {"w": torch.zeros(1)}, {"step": 4})
    check_kind(cfg, ckpt)  # ddp reads it as ever
    with pytest.raises(UserError, match="step_0000004: written by one process or "
                                        "train.parallel=ddp"):
        check_kind(replace(cfg, train=replace(cfg.train, parallel="fsdp")), ckpt)


def test_activation_checkpointing_computes_the_same_gradients():
    from dataclasses import replace

    import torch

    from depthlab.model import Transformer
    from depthlab.presets import get_preset
    from depthlab.train.parallel import checkpoint_blocks

    cfg = get_preset("tiny")
    m = replace(cfg.model, vocab_size=32, x0_mix=True)
    x = torch.randint(0, 32, (2, 16))
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = Transformer(m)
        if recompute:
            checkpoint_blocks(model)
        model(x).float().logsumexp(-1).mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        assert torch.equal(g, grads[1][name]), name
