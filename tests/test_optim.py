"""The optimizer: train.optimizer=muon steps the blocks' hidden matrices with Muon and
everything else with AdamW, its updates are (nearly) orthogonal, the two optimizers'
state round-trips as one, and it trains."""

import math
from dataclasses import replace

import pytest
import torch
from train_helpers import cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab.metrics import read_metrics
from depthlab.model import Transformer
from depthlab.presets import course, llama
from depthlab.train import train
from depthlab.train.optim import (
    Muon,
    OptimizerPair,
    describe_groups,
    lr_at,
    make_optimizer,
    newton_schulz,
    orthogonalise_dtype,
    set_lr,
)


def muon_config(base):
    return replace(base, train=replace(base.train, optimizer="muon"))


@pytest.mark.parametrize("preset", [course, llama])  # tied, and untied with its own head
def test_every_parameter_is_in_exactly_one_group_and_hidden_matrices_go_to_muon(preset):
    cfg = muon_config(preset())
    model = Transformer(cfg.model)
    opt = make_optimizer(model, cfg.train)
    assert isinstance(opt, OptimizerPair)
    grouped = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters())  # each exactly once
    names = {id(p): n for n, p in model.named_parameters()}
    muon = {names[id(p)] for g in opt.muon.param_groups for p in g["params"]}
    # the blocks' linear weights (q, k, v, o and the FFN's three) and nothing else
    expected = {f"blocks.{i}.{part}.weight" for i in range(cfg.model.n_layers)
                for part in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    assert muon == expected
    adamw = {names[id(p)] for g in opt.adamw.param_groups for p in g["params"]}
    assert "embed_tokens.weight" in adamw and "final_norm.weight" in adamw
    assert ("lm_head.weight" in adamw) == (not cfg.model.tie_embeddings)
    lines = describe_groups(model, opt).splitlines()
    assert lines[0].startswith("Muon: 28 tensors,") and "blocks.*.attn.q_proj.weight" in lines[0]
    muon_weights = sum(p.numel() for g in opt.muon.param_groups for p in g["params"])
    assert f"{muon_weights:,} weights" in lines[0] and lines[1].startswith("AdamW: ")
    assert lines[0].endswith("; Newton-Schulz in float32")  # on CPU


def test_adamw_stays_the_single_optimizer_it_was():
    cfg = course()
    opt = make_optimizer(Transformer(cfg.model), cfg.train)
    assert isinstance(opt, torch.optim.AdamW)


@pytest.mark.parametrize("shape", [(48, 16), (16, 48), (32, 32)])
def test_a_muon_update_is_nearly_orthogonal(shape):
    """A gradient whose singular values span 10x gives an update whose singular values
    are nearly equal: Newton-Schulz's band is about 0.68..1.13 of lr * sqrt(max(1, r/c))."""
    rows, cols = shape
    k = min(rows, cols)
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, dtype=torch.float64))
    grad = (u * torch.logspace(-1, 0, k, dtype=torch.float64)) @ v.T
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Linear(cols, rows, bias=False)])
    cfg = muon_config(course()).train
    opt = make_optimizer(model, cfg)
    weight = model.blocks[0].weight
    before = weight.detach().clone()
    weight.grad = grad.float()
    opt.step()
    sv = torch.linalg.svdvals((before - weight.detach()).double())
    scale = cfg.muon_lr * math.sqrt(max(1.0, rows / cols))
    assert sv.max() / sv.min() < 2.0  # the gradient's ratio is 10
    assert 0.5 * scale < sv.min() and sv.max() < 1.5 * scale


def matrices(seed: int) -> list[torch.nn.Parameter]:
    """Wide, square and tall, as the course model's FFN and attention weights are."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen))
            for shape in ((40, 16), (16, 16), (16, 40))]


def step_both(ours: Muon, theirs: torch.optim.Muon, a: list, b: list, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p, q in zip(a, b, strict=True):
        p.grad = torch.randn(p.shape, generator=gen)
        q.grad = p.grad.clone()
    ours.step()
    theirs.step()


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("rule", [None, "match_rms_adamw"])
def test_muon_in_bfloat16_is_torchs_muon_bit_for_bit(nesterov, rule):
    """The step is torch.optim.Muon's, op for op: only the dtype of the Newton-Schulz
    iterations is ours to choose (float32 on CPU)."""
    a, b = matrices(0), matrices(0)
    kwargs = dict(lr=0.02, weight_decay=0.01, momentum=0.9, nesterov=nesterov,
                  adjust_lr_fn=rule)
    ours = Muon(a, orthogonalise_in=torch.bfloat16, **kwargs)
    theirs = torch.optim.Muon(b, **kwargs)
    for seed in range(3):
        step_both(ours, theirs, a, b, seed)
        assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    assert all(torch.equal(ours.state[p]["momentum_buffer"], theirs.state[q]["momentum_buffer"])
               for p, q in zip(a, b, strict=True))


def test_muon_orthogonalises_in_float32_on_cpu_and_in_bfloat16_elsewhere():
    assert orthogonalise_dtype(torch.device("cpu")) == torch.float32
    assert orthogonalise_dtype(torch.device("cuda", 0)) == torch.bfloat16
    assert orthogonalise_dtype(torch.device("mps")) == torch.bfloat16


@pytest.mark.parametrize("shape", [(40, 16), (16, 16), (16, 40)])
def test_float32_newton_schulz_is_torchs_iteration_within_bfloat16s_rounding(shape):
    """The same five iterations: in float32 the result differs from torch's bfloat16 one
    by bfloat16's rounding (8 bits of mantissa, ~0.4% a step), not by a different map."""
    from torch.optim._muon import _zeropower_via_newtonschulz as torch_ns  # the reference

    g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    coefficients, steps, eps = (3.4445, -4.775, 2.0315), 5, 1e-7
    ours = newton_schulz(g, coefficients, steps, eps, torch.float32)
    assert ours.dtype == torch.float32 and ours.shape == g.shape
    theirs = torch_ns(g, coefficients, steps, eps).float()
    assert torch.equal(newton_schulz(g, coefficients, steps, eps, torch.bfloat16).float(), theirs)
    assert (ours - theirs).norm() / theirs.norm() < 0.05
    exact = newton_schulz(g.double(), coefficients, steps, eps, torch.float64)
    assert (ours.double() - exact).norm() < 1e-3 * exact.norm()  # float32: near float64


def test_float32_muon_leaves_the_momentum_buffer_to_the_momentum():
    """Without Nesterov the update is the buffer itself; orthogonalising it in its own
    dtype must not normalise the buffer in place."""
    (p,) = matrices(2)[:1]
    opt = Muon([p], lr=0.02, nesterov=False, weight_decay=0.0)
    p.grad = torch.ones_like(p)
    opt.step()
    assert torch.allclose(opt.state[p]["momentum_buffer"], torch.full_like(p, 1 - 0.95))


def test_the_schedule_scales_both_peaks_alike():
    cfg = muon_config(course()).train
    opt = make_optimizer(Transformer(course().model), cfg)
    for step in (0, cfg.warmup_steps, cfg.steps // 2, cfg.steps - 1):
        lr = set_lr(opt, step, cfg)
        assert lr == lr_at(step, cfg)
        assert all(g["lr"] == lr for g in opt.adamw.param_groups)
        muon_lr = opt.muon.param_groups[0]["lr"]
        assert math.isclose(muon_lr / lr, cfg.muon_lr / cfg.lr, rel_tol=1e-12)


def test_muon_trains_the_tiny_model(tmp_path):
    summary = train(config(optimizer="muon"), tmp_path / "run", progress=False)
    assert summary.status == "completed"
    losses = [r["loss"] for r in read_metrics(tmp_path / "run", "train")]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    evals = [r["val_loss"] for r in read_metrics(tmp_path / "run", "eval")]
    assert evals[-1] < evals[0]
