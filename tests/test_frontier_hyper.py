"""Known answers for the widened residual streams: hc, mhc (n copies) and attnres (depth history)."""

import copy
from dataclasses import replace

import pytest
import torch

from depthlab.config import Config, ConfigError, ModelConfig, apply_overrides
from depthlab.errors import UserError
from depthlab.generate import generate
from depthlab.model import Transformer
from depthlab.model.attention import KVCache
from depthlab.model.hyper import HC_EPS, HyperConnection, ManifoldHyperConnection, sinkhorn
from depthlab.model.residual import make_residual, stream_view
from depthlab.model.summary import summarize
from depthlab.probes.mixing import composite_gain, gains_over_depth, random_mixing

TINY = ModelConfig(vocab_size=61, context_len=40, n_layers=3, d_model=16, n_heads=4)
WIDE = [("hc", 1), ("hc", 4), ("mhc", 1), ("mhc", 4), ("attnres", 1)]


def twin(cfg: ModelConfig, seed: int) -> tuple[Transformer, Transformer]:
    """A `plain` model and a `cfg` model with the same attention, FFN and norm weights."""
    torch.manual_seed(seed)
    plain = Transformer(replace(cfg, residual="plain", streams=1))
    other = Transformer(cfg)
    missing, unexpected = other.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all("_residual." in name for name in missing)
    return plain, other


# ---- hc -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 5])
@pytest.mark.parametrize("placement", ["pre", "post", "sandwich"])
def test_hc_with_one_stream_and_identity_connections_is_plain_bitwise(seed, placement):
    plain, hc = twin(replace(TINY, residual="hc", placement=placement), seed)
    for m in hc.modules():
        if isinstance(m, HyperConnection):  # the init already is the identity; say it outright
            assert m.static_alpha.tolist() == [[1.0, 1.0]] and m.static_beta.tolist() == [1.0]
            assert not m.dynamic_alpha_fn.any() and not m.dynamic_beta_fn.any()
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(seed))
    assert torch.equal(hc(idx), plain(idx))


def test_hc_init_reads_copy_k_mod_n_and_keeps_the_copies_equal():
    _, hc = twin(replace(TINY, residual="hc", streams=4), 1)
    for i, block in enumerate(hc.blocks):
        for k, res in ((2 * i, block.attn_residual), (2 * i + 1, block.mlp_residual)):
            assert res.static_alpha[:, 0].tolist() == [float(j == k % 4) for j in range(4)]
            assert torch.equal(res.static_alpha[:, 1:], torch.eye(4))
    _, cache = hc.run_with_cache(torch.randint(0, 61, (1, 6)), names=["blocks.2.hook_resid_post"])
    copies = cache["blocks.2.hook_resid_post"]
    assert copies.shape == (1, 6, 4, 16)
    assert torch.equal(copies, copies[:, :, :1].expand_as(copies))


def test_hc_dynamic_part_follows_the_paper_formula():
    res = HyperConnection(d_model=8, n=3, eps=1e-5)
    torch.manual_seed(2)
    with torch.no_grad():
        for p in res.parameters():
            p.add_(0.5 * torch.randn_like(p))
    H, write = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 8)
    normed = torch.nn.functional.layer_norm(H, (8,), eps=1e-5)
    alpha = res.static_alpha + res.dynamic_alpha_scale * torch.tanh(normed @ res.dynamic_alpha_fn)
    beta = res.static_beta + res.dynamic_beta_scale * torch.tanh(normed @ res.dynamic_beta_fn)
    expected_in = (alpha[..., 0:1] * H).sum(-2)  # A_m^T H
    expected_out = beta[..., None] * write[..., None, :] + alpha[..., 1:].transpose(-1, -2) @ H
    assert torch.allclose(res.read(H), expected_in, atol=1e-6)
    assert torch.allclose(res(H, write), expected_out, atol=1e-6)
    assert torch.allclose(res(H.clone(), write), expected_out, atol=1e-6)  # recomputed


# ---- mhc ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 3])
def test_mhc_matches_transformers_deepseek_v4_hyper_connection(n, seed):
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperConnection

    D, eps = 16, 1e-5
    theirs = DeepseekV4HyperConnection(DeepseekV4Config(hidden_size=D, hc_mult=n, rms_norm_eps=eps))
    ours = ManifoldHyperConnection(D, n, eps, init_std=0.02)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # trained-looking weights, copied across
        ours.fn.copy_(0.3 * torch.randn(ours.fn.shape, generator=gen))
        ours.base.copy_(torch.randn(ours.base.shape, generator=gen))
        ours.scales.copy_(1 + 0.5 * torch.randn(3, generator=gen))
        theirs.fn.copy_(ours.fn)
        theirs.base.copy_(ours.base)
        theirs.scale.copy_(ours.scales)
    H = torch.randn(2, 5, n, D, generator=gen)
    write = torch.randn(2, 5, D, generator=gen)

    post, comb, collapsed = theirs(H)
    pre, our_post, our_comb = ours.weights(H)
    # float32, each side in its own order: errors in units of eps times the size of what is
    # summed (measured under ATen's default, avx2 and avx512 kernels, MKL at AVX2, 1 and 2
    # threads: post 4, comb 2.75, read 6.6, update 6.3 eps; column sums 1.1 eps past
    # 1 / (1 + eps_hc)). Allowed: 32 eps, 8 for the sums; a wrong term moves them by ~1e-2.
    eps32 = torch.finfo(torch.float32).eps
    assert torch.allclose(our_post, post, atol=32 * eps32, rtol=0)
    assert torch.allclose(our_comb, comb, atol=32 * eps32, rtol=0)
    read_size = (pre.unsqueeze(-1) * H.abs()).sum(-2)
    assert ((ours.read(H) - collapsed).abs() <= 32 * eps32 * read_size).all()
    # The decoder layer's update: post * F(h) + comb^T H (DeepseekV4DecoderLayer.forward).
    expected = post.unsqueeze(-1) * write.unsqueeze(-2) + comb.transpose(-1, -2) @ H
    size = post.unsqueeze(-1) * write.abs().unsqueeze(-2) + comb.transpose(-1, -2) @ H.abs()
    assert ((ours(H, write) - expected).abs() <= 32 * eps32 * size).all()
    assert pre.min() > 0 and our_post.max() < 2 and our_comb.min() >= 0
    # The last Sinkhorn step normalises columns: they sum to 1 / (1 + eps) whatever the
    # logits. These logits are extreme on purpose; rows need not have converged in 20 steps.
    assert torch.allclose(our_comb.sum(-2), torch.ones(2, 5, n), atol=HC_EPS + 8 * eps32, rtol=0)


@pytest.mark.parametrize("seed", range(5))
def test_mhc_comb_rows_and_columns_sum_to_one(seed):
    """At init and with biases of a trained scale: within 1e-6, which is the eps of the
    normaliser itself (a sum s becomes s / (s + 1e-6)); checked in float64."""
    res = ManifoldHyperConnection(16, 4, 1e-5, init_std=0.02).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        res.base.copy_(0.5 * torch.randn(res.base.shape, generator=gen, dtype=torch.float64))
    _, _, comb = res.weights(torch.randn(3, 7, 4, 16, generator=gen, dtype=torch.float64))
    ones = torch.ones(3, 7, 4, dtype=torch.float64)
    assert torch.allclose(comb.sum(-1), ones, atol=HC_EPS + 1e-9, rtol=0)  # rows
    assert torch.allclose(comb.sum(-2), ones, atol=HC_EPS + 1e-9, rtol=0)  # columns


def test_mhc_hooks_show_pre_post_and_comb():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, residual="mhc", streams=4))
    names = ["blocks.1.mlp_residual.hook_pre", "blocks.1.mlp_residual.hook_post",
             "blocks.1.mlp_residual.hook_comb", "blocks.1.hook_resid_mid"]
    _, cache = model.run_with_cache(torch.randint(0, 61, (2, 5)), names=names)
    assert [tuple(cache[n].shape) for n in names] == [(2, 5, 4), (2, 5, 4), (2, 5, 4, 4),
                                                      (2, 5, 4, 16)]
    comb = cache["blocks.1.mlp_residual.hook_comb"]
    assert torch.allclose(comb.sum(-2), torch.ones(2, 5, 4), atol=1e-6)


def test_sinkhorn_makes_a_positive_matrix_doubly_stochastic():
    m = torch.rand(50, 5, 5, generator=torch.Generator().manual_seed(4)) + 0.01
    out = sinkhorn(m)
    assert torch.allclose(out.sum(-1), torch.ones(50, 5), atol=1e-5)
    assert torch.allclose(out.sum(-2), torch.ones(50, 5), atol=1e-5)


# ---- attnres ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("cfg", [TINY, replace(TINY, placement="output", final_norm=False),
                                 replace(TINY, norm="none", final_norm=False, n_layers=6)])
def test_attnres_equals_plain_at_init(seed, cfg):
    plain, attnres = twin(replace(cfg, residual="attnres"), seed)
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(seed))
    names = [f"blocks.{i}.hook_{s}" for i in range(cfg.n_layers) for s in ("attn_in", "mlp_in")]
    ref_logits, ref = plain.run_with_cache(idx, names=names)
    logits, got = attnres.run_with_cache(idx, names=names)
    for n in names:  # every sublayer reads exactly what plain's reads (up to rounding)
        assert torch.allclose(got[n], ref[n], rtol=1e-5, atol=1e-6), n
    assert torch.allclose(logits, ref_logits, rtol=1e-5, atol=1e-5)


def test_attnres_reads_a_softmax_over_depth_weighted_to_sum_k():
    res = make_residual(replace(TINY, residual="attnres"))
    history = torch.randn(1, 2, 3, 16)
    with torch.no_grad():
        res.query.copy_(torch.randn(16))
    keys = history / history.pow(2).mean(-1, keepdim=True).add(TINY.norm_eps).sqrt()
    a = torch.softmax(keys @ res.query, dim=-1)
    expected = 3 * (a.unsqueeze(-1) * history).sum(-2)
    assert torch.allclose(res.read(history), expected, atol=1e-5)
    assert not torch.allclose(expected, history.sum(-2), atol=1e-3)  # no longer plain
    assert res(history, torch.ones(1, 2, 16)).shape == (1, 2, 4, 16)


def test_attnres_depth_weights_are_uniform_at_init_and_grow_with_depth():
    torch.manual_seed(0)
    model = Transformer(replace(TINY, residual="attnres"))
    names = [f"blocks.{i}.{s}_residual.hook_depth_weights" for i in range(3) for s in ("attn", "mlp")]
    _, cache = model.run_with_cache(torch.randint(0, 61, (1, 4)), names=names)
    for k, n in enumerate(names, start=1):
        assert torch.allclose(cache[n], torch.full((1, 4, k), 1 / k)), n


# ---- composite gain -----------------------------------------------------------------------

@pytest.mark.parametrize("matrices, expected", [
    ([torch.eye(3)], 1.0),
    ([torch.tensor([[2.0, 0.0], [0.0, 1.0]])] * 3, 8.0),           # 2^3 on one stream
    ([torch.tensor([[1.0, 2.0], [0.0, 1.0]])], 3.0),                # row 1 sums to 3
    ([torch.tensor([[0.5, 0.5], [2.0, 0.0]])], 2.5),                # column 1 sums to 2.5
    ([torch.tensor([[-3.0, 0.0], [0.0, 1.0]])], 3.0),               # absolute value
    ([torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([[1.0, 1.0], [0.0, 1.0]])], 2.0),
])
def test_composite_gain_on_known_matrices(matrices, expected):
    assert composite_gain(matrices) == pytest.approx(expected, abs=1e-12)


def test_composite_gain_needs_a_matrix():
    with pytest.raises(ValueError, match="at least one"):
        composite_gain([])


def test_sixty_layers_of_hc_mixing_explode_while_mhc_stays_near_one():
    seeds = range(20)
    hc = [composite_gain(random_mixing(4, 60, 0.3, s, constrained=False)) for s in seeds]
    mhc = [composite_gain(random_mixing(4, 60, 0.3, s, constrained=True)) for s in seeds]
    # Measured over seeds 0-29: HC min 7.7, median ~1300; mHC 1 - 6e-5 (Sinkhorn's eps).
    assert min(hc) > 3 and sorted(hc)[len(hc) // 2] > 100
    assert all(abs(g - 1) < 1e-3 for g in mhc)
    curve = gains_over_depth(random_mixing(4, 60, 0.3, 0, constrained=True))
    assert len(curve) == 60 and max(abs(g - 1) for g in curve) < 1e-3


# ---- config, export, describe ---------------------------------------------------------------

@pytest.mark.parametrize("sets, message", [
    (["model.streams=0"], "model.streams must be between 1 and 16, got 0"),
    (["model.streams=17", "model.residual=hc"], "model.streams must be between 1 and 16"),
    (["model.streams=4"], "model.streams=4 needs model.residual=hc or mhc"),
    (["model.residual=attnres", "model.streams=2"], "got model.residual='attnres'"),
])
def test_streams_are_validated_with_one_line(sets, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Config(), sets)


@pytest.mark.parametrize("residual", ["hc", "mhc", "attnres"])
def test_hf_export_refuses_the_widened_streams_by_name(residual):
    from depthlab.hf.config_map import hf_config_from_model

    with pytest.raises(UserError, match=f'model.residual="{residual}" has no Hugging Face'):
        hf_config_from_model(replace(TINY, residual=residual, streams=1))


@pytest.mark.parametrize("residual, n, per_write", [
    ("hc", 4, 4 * 5 + 4 + 16 * 5 + 16 + 2),       # alpha, beta, W_a, W_b, s_a, s_b
    ("mhc", 4, 24 * 64 + 24 + 3),                 # fn [(2+n)n x nD], base, scales
    ("attnres", 1, 16),                           # one query per write
])
def test_describe_counts_the_residual_parameters(residual, n, per_write):
    s = summarize(replace(TINY, residual=residual, streams=n))
    assert s.params_by_component["residual"] == 2 * TINY.n_layers * per_write
    shapes = dict(s.shapes)
    if residual == "attnres":  # the history grows: embedding + 2i + 1 writes after block i's attention
        assert [shapes[f"blocks.{i}.hook_resid_mid"] for i in range(3)] == [
            (5, 2, 16), (5, 4, 16), (5, 6, 16)]
    else:
        assert shapes["blocks.2.hook_resid_post"] == (5, n, 16)


def test_describe_prints_the_streams(capsys):
    from depthlab.cli import main

    assert main(["model", "describe", "--preset", "course", "--set", "model.residual=mhc",
                 "--set", "model.streams=4"]) == 0
    out = capsys.readouterr().out
    assert "residual=mhc streams=4" in out and "fn=[24, 512]" in out


# ---- generation, probes, training ---------------------------------------------------------

@pytest.mark.parametrize("residual, n", WIDE)
def test_greedy_generation_is_identical_with_and_without_the_cache(residual, n):
    torch.manual_seed(3)
    model = Transformer(replace(TINY, residual=residual, streams=n, init_std=0.3)).eval()
    with torch.no_grad():  # trained-looking residual weights
        for name, p in model.named_parameters():
            if "_residual." in name:
                p.add_(0.3 * torch.randn_like(p))
    with_cache = generate(model, [5, 6, 7], 50, greedy=True, use_cache=True)  # past context_len
    assert with_cache == generate(model, [5, 6, 7], 50, greedy=True, use_cache=False)
    idx = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache(model.cfg, 2, 40, torch.float32, "cpu")
        parts = torch.cat([model(idx[:, a:b], cache=cache) for a, b in ((0, 5), (5, 6), (6, 12))], 1)
        exact = copy.deepcopy(model).double()(idx)
    # Cached and full passes differ by float32 rounding only: within 8x the full pass's own
    # distance from float64 (measured across CPU kernels and 1-2 threads: up to 1.43x).
    spread = max(float((full.double() - exact).abs().max()), 1e-6 * float(full.abs().max()))
    assert float((parts - full).abs().max()) <= 8 * spread


def test_stream_view_is_the_sum_of_copies():
    x = torch.randn(2, 3, 8)
    assert stream_view(x) is x
    wide = torch.randn(2, 3, 4, 8)
    assert torch.equal(stream_view(wide), wide.sum(dim=2))


@pytest.mark.parametrize("residual, n", WIDE)
def test_real_probe_measures_a_widened_stream(residual, n):
    from depthlab.probes.real import RealRequest, real_probe

    cfg = replace(TINY, residual=residual, streams=n)
    wide, plain = (real_probe(RealRequest(c, tokens=8)) for c in (cfg, replace(TINY)))
    assert len(wide.stream_rms) == 2 * TINY.n_layers + 1 and len(wide.grad_norm) == 6
    assert all(torch.isfinite(torch.tensor(v)).all() for v in
               (wide.stream_rms, wide.grad_norm, wide.mean_cosine, wide.rel_distance))
    if residual == "attnres" or (residual == "hc" and n == 1):  # the plain stream at init
        assert wide.stream_rms == pytest.approx(plain.stream_rms, rel=1e-9)
    if residual == "hc":  # n equal copies: the read-out is n times plain's stream
        assert wide.stream_rms == pytest.approx([n * v for v in plain.stream_rms], rel=1e-9)
        assert wide.mean_cosine == pytest.approx(plain.mean_cosine, abs=1e-9)


@pytest.mark.parametrize("residual, n", WIDE)
def test_every_widened_stream_trains(residual, n):
    from depthlab.probes.stream import training_probe
    from depthlab.train.step import lm_loss

    probe = lambda model, x, y: training_probe(model, x, y, lm_loss)[1]
    torch.manual_seed(0)
    model = Transformer(replace(TINY, residual=residual, streams=n))
    x = torch.randint(0, 61, (4, 16), generator=torch.Generator().manual_seed(2))
    y = torch.roll(x, -1, dims=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    before = probe(model, x, y)
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = probe(model, x, y)
    assert after["loss"] < before["loss"] - 0.5
    grads = {name: p.grad for name, p in model.named_parameters() if "_residual." in name}
    if residual == "attnres":  # the first read has one entry (the embedding): softmax of one is 1
        assert torch.equal(grads.pop("blocks.0.attn_residual.query"), torch.zeros(16))
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values())
    assert len(after["resid_rms"]) == 2 * TINY.n_layers + 1 and len(after["grad_params"]) == 3


def test_sinkhorn_backward_matches_autograd_through_the_steps():
    def reference(m, iters=20, eps=HC_EPS):  # transformers' loop, differentiated by autograd
        m = m / (m.sum(dim=-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            m = m / (m.sum(dim=-1, keepdim=True) + eps)
            m = m / (m.sum(dim=-2, keepdim=True) + eps)
        return m

    gen = torch.Generator().manual_seed(0)
    m = (torch.rand(3, 5, 4, 4, generator=gen, dtype=torch.float64) + 0.05).requires_grad_()
    g = torch.randn(3, 5, 4, 4, generator=gen, dtype=torch.float64)
    ours, = torch.autograd.grad((sinkhorn(m) * g).sum(), m)
    theirs, = torch.autograd.grad((reference(m) * g).sum(), m)
    assert torch.allclose(sinkhorn(m), reference(m), atol=1e-14)
    assert torch.allclose(ours, theirs, atol=1e-12)
    small = (torch.rand(2, 3, 3, generator=gen, dtype=torch.float64) + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: sinkhorn(x, 5), (small,))
