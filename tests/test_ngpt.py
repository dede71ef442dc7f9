"""model.residual=ngpt, the normalised Transformer (depthlab.model.ngpt): its update and its
attention by hand, every weight vector and hidden state on the unit sphere after each
optimizer step (AdamW and Muon), training, bitwise resume, and its one-line refusals."""

import math
from dataclasses import replace

import pytest
import torch
from train_helpers import cache, config  # noqa: F401 (cache: autouse fixture)

from depthlab.config import ModelConfig, validate_model
from depthlab.errors import ConfigError
from depthlab.metrics import read_metrics
from depthlab.model import Transformer
from depthlab.model.ngpt import ALPHA_INIT, NGPTResidual, renormalise, sphere_axis
from depthlab.rundir import load_model, load_weights
from depthlab.train import train
from depthlab.train.optim import make_optimizer, ngpt_advice

NGPT = {"residual": "ngpt", "norm": "none", "final_norm": False}


def ngpt_config(**train_changes):
    cfg = config(warmup_steps=0, weight_decay=0.0, **train_changes)
    return replace(cfg, model=replace(cfg.model, **NGPT))


def sphere_norms(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The norm of every d_model-vector of every weight matrix, by parameter name."""
    out = {}
    for name, module in model.named_modules():
        axis = sphere_axis(name, module)
        if axis is not None:
            out[f"{name}.weight"] = module.weight.detach().norm(dim=axis)
    return out


def test_one_update_by_hand():
    """x = (0.6, 0.8, 0, 0), write = (0, 0, 3, 4) -> Norm(write) = (0, 0, 0.6, 0.8);
    alpha = (1/2, 1/4, 1/2, 1/4): x + alpha (Norm(write) - x) = (0.3, 0.6, 0.3, 0.2),
    whose norm is sqrt(0.58)."""
    res = NGPTResidual(4).double()
    assert torch.allclose(res.alpha(), torch.full((4,), ALPHA_INIT, dtype=torch.float64))
    with torch.no_grad():  # stored at scale 1/sqrt(4) = 1/2, used times 0.05 / (1/2)
        res.alpha.weight.copy_(torch.tensor([0.5, 0.25, 0.5, 0.25]) * 0.5 / ALPHA_INIT)
    x = torch.tensor([0.6, 0.8, 0.0, 0.0], dtype=torch.float64)
    out = res(x, torch.tensor([0.0, 0.0, 3.0, 4.0], dtype=torch.float64))
    expected = torch.tensor([0.3, 0.6, 0.3, 0.2], dtype=torch.float64) / math.sqrt(0.58)
    assert torch.allclose(out, expected, rtol=0, atol=1e-15)
    # the stream opens on the sphere: the embedding (3, 4, 0, 0) reads as (0.6, 0.8, 0, 0)
    opened = res.open(torch.tensor([3.0, 4.0, 0.0, 0.0], dtype=torch.float64))
    assert torch.allclose(opened, x, rtol=0, atol=1e-15)


def test_attention_scores_are_scaled_cosines():
    """q, k on the sphere per head times s_qk (1 at init), scores times sqrt(E), by hand."""
    cfg = ModelConfig(vocab_size=11, context_len=8, n_layers=1, d_model=8, n_heads=2,
                      position="learned", **NGPT)
    torch.manual_seed(0)
    attn = Transformer(cfg).double().blocks[0].attn
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    out, _ = attn(x, None)
    E = 4
    q = (x @ attn.q_proj.weight.T).view(5, 2, E).transpose(0, 1)
    k = (x @ attn.k_proj.weight.T).view(5, 2, E).transpose(0, 1)
    v = (x @ attn.v_proj.weight.T).view(5, 2, E).transpose(0, 1)
    # s_qk is 1 up to float32's rounding of its stored 1/sqrt(8): it is read, not assumed
    s_qk = attn.sphere_qk.s_qk().view(2, 1, E)
    assert torch.allclose(s_qk, torch.ones_like(s_qk), rtol=0, atol=1e-7)
    q, k = s_qk * q / q.norm(dim=-1, keepdim=True), s_qk * k / k.norm(dim=-1, keepdim=True)
    scores = (q @ k.transpose(-1, -2)) * math.sqrt(E)
    scores = scores.masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
    heads = scores.softmax(-1) @ v
    expected = heads.transpose(0, 1).reshape(5, 8) @ attn.o_proj.weight.T
    assert torch.allclose(out[0], expected, rtol=1e-12, atol=1e-12)


def test_init_puts_every_weight_vector_on_the_sphere_and_no_norm_layer_is_built():
    model = Transformer(replace(ModelConfig(), **NGPT))
    norms = sphere_norms(model)
    assert {"embed_tokens.weight", "blocks.0.attn.o_proj.weight", "blocks.3.mlp.down_proj.weight"} <= set(norms)
    for name, n in norms.items():
        assert torch.allclose(n, torch.ones_like(n), rtol=0, atol=1e-6), name
    # no norm module anywhere: every parameter is a matrix or one of nGPT's learned scales
    assert all(p.ndim == 2 or name.endswith(("alpha.weight", "s_qk.weight", "s_u.weight",
                                             "s_v.weight", "s_z.weight"))
               for name, p in model.named_parameters())


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_every_weight_vector_has_norm_one_after_each_trainer_step(tmp_path, optimizer):
    cfg = ngpt_config(steps=3, optimizer=optimizer, lr=1e-2, ckpt_every=1, keep_ckpts=5)
    summary = train(cfg, tmp_path / "run", progress=False)
    for step in (1, 2, 3):
        weights = load_weights(tmp_path / "run" / "checkpoints" / f"step_{step:07d}" / "model.safetensors")
        model = Transformer(summary.config.model)  # the run's vocabulary
        model.load_state_dict(weights)
        for name, n in sphere_norms(model).items():
            assert torch.allclose(n, torch.ones_like(n), rtol=0, atol=1e-6), (step, name)
    first = load_weights(tmp_path / "run" / "checkpoints" / "step_0000001" / "model.safetensors")
    last = load_weights(tmp_path / "run" / "checkpoints" / "step_0000003" / "model.safetensors")
    assert not torch.equal(first["blocks.0.attn.q_proj.weight"], last["blocks.0.attn.q_proj.weight"])


def test_the_hook_renormalises_whatever_the_optimizer_did():
    model = Transformer(replace(ModelConfig(n_layers=1, d_model=32, n_heads=2), **NGPT))
    opt = make_optimizer(model, replace(config().train, optimizer="muon", lr=0.5, muon_lr=0.5))
    model(torch.randint(0, 100, (2, 16))).sum().backward()
    opt.step()
    off = sphere_norms(model)["blocks.0.attn.q_proj.weight"]
    assert (off - 1).abs().max() > 1e-3  # the step alone leaves the sphere
    model.after_optimizer_step()
    for name, n in sphere_norms(model).items():
        assert torch.allclose(n, torch.ones_like(n), rtol=0, atol=1e-6), name


def test_hidden_states_have_norm_one(tmp_path):
    cfg = ngpt_config(steps=10)
    train(cfg, tmp_path / "run", progress=False)
    model, _ = load_model(tmp_path / "run")
    seen = {}

    def record(t, name):
        seen[name] = t.detach()

    names = [f"blocks.{i}.hook_{p}" for i in range(cfg.model.n_layers)
             for p in ("resid_pre", "resid_mid", "resid_post")]
    with torch.no_grad(), model.hooks(fwd=[(n, record) for n in names]):
        model(torch.randint(0, model.cfg.vocab_size, (3, 20)))
    assert set(seen) == set(names)
    for name, h in seen.items():
        n = h.norm(dim=-1)
        assert torch.allclose(n, torch.ones_like(n), rtol=0, atol=1e-5), name


def test_ngpt_trains_the_tiny_model(tmp_path):
    summary = train(ngpt_config(lr=1e-2), tmp_path / "run", progress=False)
    assert summary.status == "completed"
    losses = [r["loss"] for r in read_metrics(tmp_path / "run", "train")]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    evals = [r["val_loss"] for r in read_metrics(tmp_path / "run", "eval")]
    assert evals[-1] < evals[0]


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_interrupted_and_resumed_ngpt_run_is_bitwise_identical(tmp_path, optimizer):
    cfg = ngpt_config(steps=40, ckpt_every=10, optimizer=optimizer)
    train(cfg, tmp_path / "full", progress=False)
    stopped = train(cfg, tmp_path / "split", progress=False, max_steps=17)
    assert stopped.status == "interrupted" and stopped.step == 17
    resumed = train(cfg, tmp_path / "split", progress=False, resume=True)
    assert resumed.status == "completed" and resumed.step == 40
    full = load_weights(tmp_path / "full" / "model.safetensors")
    split = load_weights(tmp_path / "split" / "model.safetensors")
    assert full.keys() == split.keys() and all(torch.equal(full[k], split[k]) for k in full)
    assert ([r["loss"] for r in read_metrics(tmp_path / "split", "train")]
            == [r["loss"] for r in read_metrics(tmp_path / "full", "train")])


@pytest.mark.parametrize("changes, fragment", [
    ({"residual": "ngpt"}, "model.norm='rmsnorm' is not allowed, set model.norm=none and "
                           "model.final_norm=false"),
    ({**NGPT, "norm": "layernorm"}, "model.norm='layernorm' is not allowed"),
    ({**NGPT, "final_norm": True}, "model.final_norm=true needs a norm"),
    ({**NGPT, "ffn": "gelu"}, "model.residual='ngpt' scales SwiGLU's two inputs"),
    ({**NGPT, "placement": "post"}, "model.placement='post' is not allowed"),
])
def test_refusals_are_one_line(changes, fragment):
    with pytest.raises(ConfigError) as e:
        validate_model(replace(ModelConfig(), **changes))
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_warmup_and_weight_decay_get_one_line_of_advice():
    cfg = config()
    assert ngpt_advice(cfg) is None  # not nGPT
    ngpt = replace(cfg, model=replace(cfg.model, **NGPT))
    line = ngpt_advice(ngpt)
    assert line is not None and "\n" not in line and "train.warmup_steps=5" in line
    assert ngpt_advice(ngpt_config()) is None  # the paper's setting


def test_renormalise_is_idempotent_on_the_sphere():
    model = Transformer(replace(ModelConfig(n_layers=1, d_model=16, n_heads=2), **NGPT))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    renormalise(model)
    # a float32 vector already of norm 1 moves by at most a few units in the last place
    assert all(torch.allclose(before[k], v, rtol=0, atol=1e-6) for k, v in model.state_dict().items())


def test_model_describe_counts_every_ngpt_parameter():
    from depthlab.model.summary import count_parameters

    cfg = replace(ModelConfig(n_layers=3), **NGPT)
    count = count_parameters(cfg)
    assert count.total == sum(p.numel() for p in Transformer(cfg).parameters())
    # s_z with the head; alpha with the residual, one d-vector per write (its spec's count)
    assert count.by_stage["lm_head"] == cfg.vocab_size
    assert count.by_component["residual"] == 2 * cfg.n_layers * cfg.d_model
