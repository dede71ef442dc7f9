"""Known answers for the residual-frontier switches in the model: residual=deepnorm,
norm_scale=depth, norm=dyt and value_residual (each checked against its paper's formula,
computed here independently), with the combinations they refuse, the KV cache, the
Hugging Face export refusal, a short training run and the run probe."""

import json
import math
from dataclasses import replace

import pytest
import torch
from train_helpers import cache, config  # noqa: F401  (cache: the autouse fixture)

from depthlab import rundir
from depthlab.cli import main
from depthlab.config import NORMS, RESIDUALS, ModelConfig, validate_model
from depthlab.errors import ConfigError
from depthlab.generate import generate
from depthlab.model import Transformer
from depthlab.model.attention import KVCache
from depthlab.model.norms import NORM_CLASSES, make_norm
from depthlab.model.residual import make_residual
from depthlab.model.summary import summarize
from depthlab.model.transformer import Block
from depthlab.train.loop import train

TINY = ModelConfig(vocab_size=40, context_len=24, n_layers=3, d_model=16, n_heads=2)
POST = replace(TINY, placement="post")
FRONTIER = {
    "deepnorm": {"residual": "deepnorm", "placement": "post"},
    "norm_scale": {"norm_scale": "depth"},
    "dyt": {"norm": "dyt"},
    "value_residual": {"value_residual": True},
}


# ---- residual=deepnorm ---------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 6, 12, 18, 24, 50, 100, 200, 1000])
def test_deepnorm_alpha_beta_follow_the_decoder_only_rule(n):
    """DeepNet, decoder-only: alpha = (2N)^(1/4), beta = (8N)^(-1/4); recomputed here as
    nested square roots, and checked on every write of an N-layer model."""
    alpha, beta = math.sqrt(math.sqrt(2 * n)), 1 / math.sqrt(math.sqrt(8 * n))
    res = make_residual(replace(POST, residual="deepnorm", n_layers=n))
    assert res.alpha == pytest.approx(alpha, rel=1e-14)
    assert res.beta == pytest.approx(beta, rel=1e-14)


def test_deepnorm_constants_at_depths_with_closed_forms():
    for n, alpha, beta in [(2, math.sqrt(2), 0.5), (18, math.sqrt(6), 1 / math.sqrt(12)),
                           (6, 12 ** 0.25, 48 ** -0.25), (12, 24 ** 0.25, 96 ** -0.25)]:
        res = make_residual(replace(POST, residual="deepnorm", n_layers=n))
        assert (res.alpha, res.beta) == pytest.approx((alpha, beta), rel=1e-14)
    assert make_residual(replace(POST, residual="deepnorm", n_layers=6)).alpha == \
        pytest.approx(1.8612, abs=1e-4)  # the value the paper's 6-layer decoder uses


def test_deepnorm_write_on_a_fixed_vector():
    res = make_residual(replace(POST, residual="deepnorm"))  # 3 layers: alpha = 6^(1/4)
    x, f = torch.tensor([1.0, 2.0]), torch.tensor([5.0, 7.0])
    alpha = 6 ** 0.25
    assert res(res.read(x), res.scale(f)).tolist() == pytest.approx([alpha + 5, 2 * alpha + 7])


def test_deepnorm_block_is_post_ln_of_the_upweighted_stream():
    torch.manual_seed(0)
    model = Transformer(replace(POST, residual="deepnorm")).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    names = ["blocks.1.hook_resid_pre", "blocks.1.hook_attn_write", "blocks.1.hook_resid_mid"]
    _, c = model.run_with_cache(embeds=x, names=names)
    block = model.blocks[1]
    alpha = 6 ** 0.25
    expected = block.attn_norm_post(alpha * c[names[0]] + c[names[1]])
    torch.testing.assert_close(c[names[2]], expected, rtol=1e-12, atol=1e-12)


def test_deepnorm_init_is_xavier_normal_with_gain_beta_on_v_o_and_ffn():
    """DeepNet's init: every linear starts Xavier-normal, std sqrt(2 / (fan_in + fan_out)),
    and v/o/FFN take gain beta (q and k gain 1). Same seed, same draws: each weight is
    (xavier std x gain / 0.02) times a plain Post-LN model's (scaled_init off there), and the
    embedding is unchanged."""
    cfg = replace(POST, n_layers=6, d_model=32, n_heads=4)
    torch.manual_seed(3)
    deep = Transformer(replace(cfg, residual="deepnorm"))
    torch.manual_seed(3)
    plain = Transformer(replace(cfg, scaled_init=False))
    beta = 48 ** -0.25
    deep_p, plain_p = dict(deep.named_parameters()), dict(plain.named_parameters())
    modules = dict(plain.named_modules())
    scaled = ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    n_scaled = 0
    for name, p in plain_p.items():
        module = modules[name.removesuffix(".weight")]
        if not isinstance(module, torch.nn.Linear):
            torch.testing.assert_close(deep_p[name], p, rtol=0, atol=0)
            continue
        gain = beta if name.removesuffix(".weight").endswith(scaled) else 1.0
        n_scaled += gain != 1.0
        xavier = math.sqrt(2 / (module.in_features + module.out_features))
        torch.testing.assert_close(deep_p[name], gain * xavier / cfg.init_std * p, rtol=1e-6, atol=0)
    assert n_scaled == 5 * 6
    assert replace(cfg, residual="deepnorm").out_proj_std == cfg.init_std


def test_deepnorm_needs_post_placement():
    for placement in ("pre", "sandwich", "output"):
        with pytest.raises(ConfigError, match=r"model.residual='deepnorm'.*model.placement"):
            validate_model(replace(TINY, residual="deepnorm", placement=placement))
    validate_model(replace(POST, residual="deepnorm"))


# ---- norm_scale=depth ----------------------------------------------------------------

@pytest.mark.parametrize("placement", ["pre", "sandwich"])
@pytest.mark.parametrize("layer", [0, 1, 3, 15])
def test_depth_scaled_pre_norms_are_the_plain_ones_times_inverse_sqrt_depth(placement, layer):
    """Block l (0-based) on the same weights and input: its input norms' outputs are those
    of norm_scale=none times 1/sqrt(l + 1), bitwise; the output norms are not scaled."""
    torch.manual_seed(layer)
    cfg = replace(TINY, placement=placement, n_layers=16)
    scaled, plain = Block(replace(cfg, norm_scale="depth"), layer), Block(cfg, layer)
    plain.load_state_dict(scaled.state_dict())
    x = torch.randn(2, 5, 16)
    s = 1 / math.sqrt(layer + 1)
    with torch.no_grad():
        h = scaled.norm_in(scaled.attn_norm_in, x)
        assert torch.equal(h, plain.attn_norm_in(x) * s)
        assert torch.equal(scaled.norm_in(scaled.mlp_norm_in, x), plain.mlp_norm_in(x) * s)
        if layer == 0:
            assert torch.equal(h, plain.attn_norm_in(x))  # 1/sqrt(1): the very same tensor
    assert scaled.in_norm_scale == s


def test_depth_scaling_in_the_whole_model_at_every_block():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, norm_scale="depth", qk_norm=True, n_layers=4))
    x = torch.randn(1, 6, 16)
    names = [f"blocks.{i}.hook_{s}" for i in range(4) for s in
             ("resid_pre", "attn_in", "resid_mid", "mlp_in")] + ["hook_final",
                                                                  "blocks.3.hook_resid_post"]
    _, c = model.run_with_cache(embeds=x, names=names)
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            s = 1 / math.sqrt(i + 1)
            assert torch.equal(c[f"blocks.{i}.hook_attn_in"],
                               block.attn_norm_in(c[f"blocks.{i}.hook_resid_pre"]) * s)
            assert torch.equal(c[f"blocks.{i}.hook_mlp_in"],
                               block.mlp_norm_in(c[f"blocks.{i}.hook_resid_mid"]) * s)
        # the final norm is left alone
        assert torch.equal(c["hook_final"], model.final_norm(c["blocks.3.hook_resid_post"]))


@pytest.mark.parametrize("changes", [
    {"placement": "post"}, {"placement": "output"}, {"norm": "none", "final_norm": False},
])
def test_norm_scale_depth_refuses_blocks_without_pre_norms(changes):
    with pytest.raises(ConfigError, match=r"model.norm_scale='depth'.*placement pre or sandwich"):
        validate_model(replace(TINY, norm_scale="depth", **changes))


def test_norm_scale_names_its_values():
    with pytest.raises(ConfigError, match="model.norm_scale='layer' is not allowed; choose one "
                                          "of: none, depth"):
        validate_model(replace(TINY, norm_scale="layer"))


# ---- norm=dyt ------------------------------------------------------------------------

def test_dyt_formula_on_a_fixed_vector():
    x = [-3.0, -0.5, 0.0, 1.0, 4.0]
    norm = make_norm("dyt", 5, 1e-5)
    assert isinstance(norm, NORM_CLASSES["dyt"]) and "dyt" in NORMS
    at_init = norm(torch.tensor(x, dtype=torch.float64).unsqueeze(0).to(torch.float32))
    assert at_init[0].tolist() == pytest.approx([math.tanh(0.5 * v) for v in x], abs=1e-7)
    gamma, beta, alpha = [2.0, -1.0, 0.5, 3.0, 1.0], [0.1, 0.2, -0.3, 0.0, 5.0], 1.7
    with torch.no_grad():
        norm.alpha.fill_(alpha)
        norm.weight.copy_(torch.tensor(gamma))
        norm.bias.copy_(torch.tensor(beta))
    expected = [g * math.tanh(alpha * v) + b for v, g, b in zip(x, gamma, beta, strict=True)]
    assert norm(torch.tensor(x)).tolist() == pytest.approx(expected, abs=1e-6)
    assert norm.alpha.shape == () and sum(p.numel() for p in norm.parameters()) == 2 * 5 + 1


def test_dyt_init_is_restored_by_init_weights_and_alpha_learns():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, norm="dyt", qk_norm=True))
    alphas = [p for n, p in model.named_parameters() if n.endswith("norm_in.alpha")
              or n.endswith("final_norm.alpha") or n.endswith("_norm.alpha")]
    assert len(alphas) == 3 * 2 + 3 * 2 + 1 and all(a.item() == 0.5 for a in alphas)
    idx = torch.randint(0, 40, (2, 8))
    torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
    assert all(a.grad is not None and a.grad.abs().item() > 0 for a in alphas)


# ---- value_residual ------------------------------------------------------------------

def _value_pair(seed: int = 0, **changes):
    torch.manual_seed(seed)
    base = Transformer(replace(TINY, **changes))
    mixed = Transformer(replace(TINY, value_residual=True, **changes))
    missing, unexpected = mixed.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and sorted(missing) == [f"blocks.{i}.attn.value_residual.lambdas"
                                                  for i in (1, 2)]
    return base, mixed


@pytest.mark.parametrize("changes", [{}, {"n_kv_heads": 1}, {"placement": "post"}])
def test_value_residual_with_lambda2_zero_is_the_baseline_bitwise(changes):
    base, mixed = _value_pair(**changes)
    idx = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        for block in mixed.blocks[1:]:
            block.attn.value_residual.lambdas.copy_(torch.tensor([1.0, 0.0]))
    assert torch.equal(mixed(idx), base(idx))
    with torch.no_grad():  # the paper's init, 0.5 / 0.5, is a real mix
        for block in mixed.blocks[1:]:
            block.attn.value_residual.reset_parameters()
    assert not torch.allclose(mixed(idx), base(idx), atol=1e-4)


def test_later_layers_mix_in_layer_zeros_values():
    """Every later layer's hook_v_first is layer 0's V; its V is lambda1 * (its own
    v_proj of its input) + lambda2 * that V."""
    torch.manual_seed(0)
    model = Transformer(replace(TINY, value_residual=True))
    with torch.no_grad():
        model.blocks[2].attn.value_residual.lambdas.copy_(torch.tensor([0.7, -1.3]))
    names = ["blocks.0.attn.hook_v", "blocks.1.attn.hook_v_first", "blocks.2.attn.hook_v_first",
             "blocks.2.hook_attn_in", "blocks.2.attn.hook_v"]
    _, c = model.run_with_cache(torch.randint(0, 40, (1, 7)), names=names)
    v1 = c["blocks.0.attn.hook_v"]
    assert torch.equal(c[names[1]], v1) and torch.equal(c[names[2]], v1)
    with torch.no_grad():
        own = model.blocks[2].attn.v_proj(c["blocks.2.hook_attn_in"])
    own = own.reshape(1, 7, 2, 8).transpose(1, 2)  # [B, K, T, E]
    torch.testing.assert_close(c["blocks.2.attn.hook_v"], 0.7 * own - 1.3 * v1,
                               rtol=1e-6, atol=1e-7)
    assert not hasattr(model.blocks[0].attn, "hook_v_first")


def test_value_residual_lambdas_learn_and_reach_layer_zero():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, value_residual=True))
    idx = torch.randint(0, 40, (2, 8))
    torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
    for block in model.blocks[1:]:
        assert block.attn.value_residual.lambdas.grad.abs().min() > 0
    assert model.blocks[0].attn.value_residual is None


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("changes", [{}, {"n_kv_heads": 1, "qk_norm": True},
                                     {"position": "learned", "norm": "dyt"}])
def test_value_residual_greedy_tokens_equal_with_and_without_the_cache(seed, changes):
    torch.manual_seed(seed)
    cfg = replace(TINY, value_residual=True, init_std=0.3, vocab_size=97, n_layers=4, **changes)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # trained-looking lambdas
        for block in model.blocks[1:]:
            block.attn.value_residual.lambdas.copy_(torch.randn(2))
    prompt = torch.randint(0, 97, (5,), generator=torch.Generator().manual_seed(seed)).tolist()
    # 30 tokens run past context_len = 24: the window-recompute phase is covered too
    assert generate(model, prompt, 30, greedy=True, use_cache=True) == \
        generate(model, prompt, 30, greedy=True, use_cache=False)
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        kv = KVCache(model.cfg, 2, 24, torch.float32, "cpu")
        parts = [model(idx[:, a:b], cache=kv) for a, b in ((0, 6), (6, 7), (7, 16))]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=2e-5, rtol=1e-4)


# ---- all four: counts, export, training, probes ----------------------------------------

@pytest.mark.parametrize("n_layers", [1, 2, 5])
@pytest.mark.parametrize("switch", list(FRONTIER))
def test_describe_counts_every_parameter(switch, n_layers):
    cfg = replace(TINY, n_layers=n_layers, **FRONTIER[switch])
    real = sum(p.numel() for p in Transformer(cfg).parameters())
    assert summarize(cfg).total_params == real
    # against the same model without the switch: value_residual adds two lambdas to each
    # block but the first; dyt has layernorm's gamma and beta plus one alpha per norm
    base = replace(TINY, n_layers=n_layers, placement=cfg.placement,
                   norm="layernorm" if switch == "dyt" else TINY.norm)
    extra = {"value_residual": 2 * (n_layers - 1), "dyt": 2 * n_layers + 1}.get(switch, 0)
    assert real == sum(p.numel() for p in Transformer(base).parameters()) + extra


def test_registries_list_the_new_names():
    assert "deepnorm" in RESIDUALS and "dyt" in NORMS and "dyt" in NORM_CLASSES


@pytest.mark.parametrize("switch", list(FRONTIER))
def test_hf_export_refuses_each_switch_by_name(tmp_path, capsys, switch):
    cfg = replace(ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=50),
                  **FRONTIER[switch])
    rundir.write_config(tmp_path / "run", replace(config(), model=cfg))
    rc = main(["hf", "export", str(tmp_path / "run"), "--out", str(tmp_path / "hf")])
    err = capsys.readouterr().err.strip().splitlines()
    field = {"deepnorm": "model.residual", "norm_scale": "model.norm_scale",
             "dyt": "model.norm", "value_residual": "model.value_residual"}[switch]
    assert rc == 2 and len(err) == 1
    assert f"{field}=" in err[0] and "no Hugging Face equivalent" in err[0]
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("switch", list(FRONTIER))
def test_each_switch_trains_and_probes(tmp_path, capsys, switch):
    cfg = config(steps=6, eval_every=3, probe_every=3, ckpt_every=3, warmup_steps=1)
    cfg = replace(cfg, model=replace(cfg.model, **FRONTIER[switch]))
    summary = train(cfg, tmp_path / "run", progress=False)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if x.get("kind") == "train"]
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] and (summary.status, summary.step) == ("completed", 6)
    assert main(["probe", "run", str(tmp_path / "run"), "--ids", "1,2,3,4,5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    L = cfg.model.n_layers
    assert len(out["grad_norm"]) == 2 * L and len(out["stream_rms"]) == 2 * L + 1
    assert all(math.isfinite(v) and v > 0 for v in out["grad_norm"] + out["stream_rms"])


@pytest.mark.parametrize("args, fragment", [
    (["--set", "model.residual=deepnorm"], "set model.placement=post"),
    (["--set", "model.norm_scale=depth", "--set", "model.placement=output"],
     "model.norm_scale='depth'"),
    (["--set", "model.norm_scale=deep"], "choose one of: none, depth"),
    (["--set", "model.norm=tanh"], "rmsnorm_zero_centered, dyt"),
    (["--set", "model.value_residual=maybe"], "model.value_residual must be true or false"),
])
def test_cli_refuses_bad_switches_in_one_line(capsys, args, fragment):
    assert main(["model", "describe", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]


def test_describe_shows_each_switch(capsys):
    argv = ["model", "describe", "--set", "model.n_layers=18", "--set", "model.placement=post",
            "--set", "model.residual=deepnorm", "--set", "model.norm=dyt",
            "--set", "model.value_residual=true"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # the constants of the 18-layer run: alpha = sqrt(6), beta = 1/sqrt(12)
    assert "DeepNormResidual(alpha=2.44949, beta=0.288675)" in out
    assert "(attn_norm_post): DyT(alpha_init=0.5)" in out
    assert "(value_residual): ValueResidual(lambda_init=(0.5, 0.5))" in out
    assert "value_residual=True" in out and "residual=deepnorm" in out
    assert main(["model", "describe", "--set", "model.norm_scale=depth"]) == 0
    out = capsys.readouterr().out
    assert "norm_scale=depth" in out and "in_norm_scale=0.707107" in out  # block 1: 1/sqrt(2)
