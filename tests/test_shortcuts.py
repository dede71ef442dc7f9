"""The stream shortcuts (depthlab.model.shortcuts): each one's arithmetic on numbers worked
out by hand, its place in the model read through the hook points, its init (nanochat's),
its config refusals, and what it learns."""

import math
import os
import signal
from dataclasses import replace

import pytest
import torch

from depthlab.config import Config, ConfigError, ModelConfig, TrainConfig, validate_model
from depthlab.generate import generate
from depthlab.model import Transformer
from depthlab.model.shortcuts import Backout, Smear, UNetSkip, ValueEmbedding, X0Mix
from depthlab.model.summary import count_parameters
from depthlab.train.optim import param_groups

TINY = ModelConfig(vocab_size=30, context_len=32, n_layers=4, d_model=24, n_heads=2)


def model(**changes) -> Transformer:
    torch.manual_seed(0)
    return Transformer(replace(TINY, **changes)).eval()


def run_with(m: Transformer, idx: torch.Tensor, names: list[str]):
    with torch.no_grad():
        return m.run_with_cache(idx, names=names)


IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])

# ---- x0_mix --------------------------------------------------------------------------


def test_x0_mix_on_numbers_by_hand():
    mix = X0Mix(0, 2)  # layer 0 of 2: resid 1.15, x0 0.20
    out = mix(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(out, torch.tensor([1.15 + 0.6, 2.3 + 0.8]))


def test_x0_mix_init_is_nanochats_linear_ramp():
    m = model(x0_mix=True, n_layers=5)
    resid = [b.x0_mix.resid_lambda.item() for b in m.blocks]
    x0 = [b.x0_mix.x0_lambda.item() for b in m.blocks]
    assert resid == pytest.approx([1.15, 1.125, 1.10, 1.075, 1.05], abs=1e-6)
    assert x0 == pytest.approx([0.20, 0.1625, 0.125, 0.0875, 0.05], abs=1e-6)
    one = model(x0_mix=True, n_layers=1)  # one block: the start of both ramps
    assert one.blocks[0].x0_mix.resid_lambda.item() == pytest.approx(1.15)


def test_x0_is_the_normalised_embedding_and_every_block_input_mixes_it():
    m = model(x0_mix=True)
    with torch.no_grad():
        for i, b in enumerate(m.blocks):  # distinct values, away from the init
            b.x0_mix.resid_lambda.fill_(0.5 + 0.25 * i)
            b.x0_mix.x0_lambda.fill_(-0.3 + 0.2 * i)
    names = ["hook_embed", "embed_shortcuts.hook_x0",
             *(f"blocks.{i}.hook_resid_{s}" for i in range(4) for s in ("pre", "post"))]
    _, c = run_with(m, IDX, names)
    e = c["hook_embed"]
    rms = e.pow(2).mean(-1, keepdim=True).add(TINY.norm_eps).sqrt()
    torch.testing.assert_close(c["embed_shortcuts.hook_x0"], e / rms)
    x0 = c["embed_shortcuts.hook_x0"]
    torch.testing.assert_close(c["blocks.0.hook_resid_pre"], 0.5 * x0 - 0.3 * x0)
    for i in range(1, 4):
        want = (0.5 + 0.25 * i) * c[f"blocks.{i - 1}.hook_resid_post"] + (-0.3 + 0.2 * i) * x0
        torch.testing.assert_close(c[f"blocks.{i}.hook_resid_pre"], want)


# ---- backout -------------------------------------------------------------------------


def test_backout_on_numbers_by_hand():
    out = Backout(1)(torch.tensor([1.0, 2.0]), torch.tensor([5.0, 5.0]))  # lambda 0.2
    torch.testing.assert_close(out, torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("n_layers,middle", [(3, 1), (4, 2), (7, 3)])
def test_backout_subtracts_the_stream_after_block_half_of_L(n_layers, middle):
    m = model(backout=True, final_norm=False, n_layers=n_layers)
    assert m.backout.layer == middle
    names = ["hook_final", *(f"blocks.{i}.hook_resid_post" for i in range(n_layers))]
    _, c = run_with(m, IDX, names)
    want = c[f"blocks.{n_layers - 1}.hook_resid_post"] - 0.2 * c[f"blocks.{middle}.hook_resid_post"]
    torch.testing.assert_close(c["hook_final"], want)


# ---- value_embeds --------------------------------------------------------------------


def test_value_embedding_on_numbers_by_hand():
    ve = ValueEmbedding(replace(TINY, n_heads=2, n_kv_heads=1, head_dim=2))  # K 1, E 2
    with torch.no_grad():
        ve.gate.zero_()  # 3 sigmoid(0) = 1.5
        ve.table.copy_(torch.arange(60.0).view(30, 2))
    out = ve(torch.tensor([[0, 7]]), torch.zeros(1, 2, 24))
    torch.testing.assert_close(out, torch.tensor([[[[0.0, 1.5], [21.0, 22.5]]]]))
    with torch.no_grad():  # a gate of w = 1 on channel 0 only, read at h[0] = ln 3:
        ve.gate[0, 0] = 1.0  # 3 sigmoid(ln 3) = 3 * 3/4 = 2.25
    h = torch.zeros(1, 2, 24)
    h[..., 0] = math.log(3.0)
    torch.testing.assert_close(ve(torch.tensor([[1, 1]]), h)[0, 0, 0], torch.tensor([4.5, 6.75]))


@pytest.mark.parametrize("n_layers,layers", [(4, [1, 3]), (5, [0, 2, 4]), (1, [0])])
def test_value_embeddings_sit_on_every_other_layer_the_last_always(n_layers, layers):
    m = model(value_embeds=True, n_layers=n_layers)
    assert [i for i, b in enumerate(m.blocks) if b.attn.value_embed is not None] == layers


def test_the_value_embedding_is_added_to_v():
    base, ve = model(), model(value_embeds=True)
    ve.load_state_dict(base.state_dict(), strict=False)  # the same weights but the tables
    names = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_v"]
    _, a = run_with(base, IDX, names)
    _, b = run_with(ve, IDX, [*names, "blocks.1.attn.hook_value_embed",
                              "blocks.1.attn.value_embed.hook_gate"])
    torch.testing.assert_close(b["blocks.0.hook_resid_post"], a["blocks.0.hook_resid_post"])
    torch.testing.assert_close(b["blocks.1.attn.hook_v"],
                               a["blocks.1.attn.hook_v"] + b["blocks.1.attn.hook_value_embed"])
    gate = b["blocks.1.attn.value_embed.hook_gate"]  # [B, K, T], gate weights in [0, 0.02]
    assert gate.shape == (1, 2, 8) and ((gate > 1.4) & (gate < 1.6)).all()


def test_value_embeds_need_the_token_ids():
    m = model(value_embeds=True)
    with pytest.raises(ValueError, match="token ids"):
        m(embeds=m.embed(IDX))
    torch.testing.assert_close(m(IDX, embeds=m.embed(IDX)), m(IDX))


# ---- smear ---------------------------------------------------------------------------


def test_smear_on_numbers_by_hand():
    smear = Smear()
    with torch.no_grad():
        smear.gate.zero_()  # sigmoid(0) = 1/2
        smear.lam.fill_(1.0)
    x = torch.zeros(1, 3, 24)
    x[0, :, 0] = torch.tensor([2.0, 4.0, 8.0])
    out = smear(x)
    torch.testing.assert_close(out[0, :, 0], torch.tensor([2.0, 4.0 + 1.0, 8.0 + 2.0]))
    prev = torch.zeros(1, 1, 24)
    prev[0, 0, 0] = 6.0  # a cached token before these: the first mixes it in too
    torch.testing.assert_close(smear(x, prev)[0, :, 0], torch.tensor([5.0, 5.0, 10.0]))


def test_smear_starts_off_and_its_cache_path_is_the_full_pass():
    m = model(smear=True)
    _, c = run_with(m, IDX, ["hook_embed", "embed_shortcuts.hook_x0"])
    torch.testing.assert_close(c["embed_shortcuts.hook_x0"], c["hook_embed"])  # lambda 0
    with torch.no_grad():
        m.embed_shortcuts.smear.lam.fill_(3.0)
    prompt = [3, 1, 4, 1, 5]
    assert generate(m, prompt, 20, greedy=True) == generate(m, prompt, 20, greedy=True,
                                                            use_cache=False)


# ---- unet_skips ----------------------------------------------------------------------


def test_unet_skip_on_numbers_by_hand():
    skip = UNetSkip(0)
    with torch.no_grad():
        skip.weight.fill_(0.5)
    torch.testing.assert_close(skip(torch.tensor([1.0]), torch.tensor([4.0])), torch.tensor([3.0]))


@pytest.mark.parametrize("n_layers,sources", [(2, {1: 0}), (4, {2: 1, 3: 0}), (5, {3: 1, 4: 0})])
def test_unet_skips_add_the_mirrored_blocks_output(n_layers, sources):
    m = model(unet_skips=True, n_layers=n_layers)
    assert {i: b.unet_skip.source for i, b in enumerate(m.blocks) if b.unet_skip} == sources
    with torch.no_grad():
        for i in sources:
            m.blocks[i].unet_skip.weight.fill_(0.1 * i)
    names = [f"blocks.{i}.hook_resid_{s}" for i in range(n_layers) for s in ("pre", "post")]
    _, c = run_with(m, IDX, [*names, *(f"blocks.{i}.unet_skip.hook_skip" for i in sources)])
    for i, j in sources.items():
        torch.testing.assert_close(c[f"blocks.{i}.unet_skip.hook_skip"],
                                   0.1 * i * c[f"blocks.{j}.hook_resid_post"])
    for i in range(1, n_layers):
        want = c[f"blocks.{i - 1}.hook_resid_post"]
        if i in sources:
            want = want + 0.1 * i * c[f"blocks.{sources[i]}.hook_resid_post"]
        torch.testing.assert_close(c[f"blocks.{i}.hook_resid_pre"], want)


# ---- logit_softcap -------------------------------------------------------------------


def test_logit_softcap_on_numbers_by_hand():
    capped, plain = model(logit_softcap=2.0), model()
    plain.load_state_dict(capped.state_dict())
    with torch.no_grad():
        plain.embed_tokens.weight.mul_(40.0)
        capped.embed_tokens.weight.mul_(40.0)  # logits of tens of units
        raw, out = plain(IDX), capped(IDX)
    assert float(raw.abs().max()) > 4
    torch.testing.assert_close(out, 2.0 * torch.tanh(raw / 2.0))
    assert float(out.abs().max()) <= 2.0
    # 15 tanh(30 / 15) = 15 tanh 2 = 14.4604...
    from depthlab.model.shortcuts import logit_softcap
    assert float(logit_softcap(torch.tensor(30.0), 15.0)) == pytest.approx(15 * math.tanh(2))


# ---- config, parameters, optimizer ---------------------------------------------------


@pytest.mark.parametrize("changes,message", [
    ({"backout": True, "n_layers": 2}, "model.backout=true"),
    ({"unet_skips": True, "n_layers": 1}, "model.unet_skips=true"),
    ({"smear": True, "d_model": 16}, "model.smear=true"),
    ({"value_embeds": True, "d_model": 8, "n_heads": 2}, "model.value_embeds=true"),
    ({"logit_softcap": 0.0}, "model.logit_softcap must be > 0"),
    ({"logit_softcap": -15.0}, "model.logit_softcap must be > 0"),
    ({"x0_mix": True, "residual": "hc", "streams": 2}, "model.x0_mix=true"),
    ({"unet_skips": True, "residual": "attnres"}, "model.unet_skips=true"),
])
def test_impossible_shortcuts_are_refused_in_one_line(changes, message):
    with pytest.raises(ConfigError) as err:
        validate_model(replace(TINY, **changes))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("residual", ["hc", "attnres"])
def test_smear_and_value_embeds_work_on_a_wide_stream(residual):
    """Both act before the stream opens (smear) or inside attention (value embeddings)."""
    streams = 2 if residual == "hc" else 1
    m = model(smear=True, value_embeds=True, residual=residual, streams=streams)
    with torch.no_grad():
        m.embed_shortcuts.smear.lam.fill_(1.0)
    prompt = [3, 1, 4, 1, 5]
    assert generate(m, prompt, 10, greedy=True) == generate(m, prompt, 10, greedy=True,
                                                            use_cache=False)
    assert count_parameters(m.cfg).total == sum(p.numel() for p in m.parameters())


def test_softcap_null_from_the_command_line():
    from depthlab.config import apply_overrides

    cfg = apply_overrides(Config(), ["model.logit_softcap=15"])
    assert cfg.model.logit_softcap == 15.0
    assert apply_overrides(cfg, ["model.logit_softcap=null"]).model.logit_softcap is None


ALL = {"x0_mix": True, "backout": True, "value_embeds": True, "smear": True,
       "unet_skips": True, "logit_softcap": 15.0, "value_residual": True}


@pytest.mark.parametrize("n_layers", [3, 4, 7])
def test_counts_equal_the_built_model(n_layers):
    cfg = replace(TINY, n_layers=n_layers, **ALL)
    m = Transformer(cfg)
    real = sum(p.numel() for p in m.parameters())
    assert count_parameters(cfg).total == real
    shortcut = sum(p.numel() for n, p in m.named_parameters()
                   if any(k in n for k in ("x0_mix", "unet_skip", "value_embed", "embed_shortcuts",
                                           "backout")))
    assert cfg.shortcut_params == shortcut


def test_scalars_and_gates_take_no_weight_decay():
    m = Transformer(replace(TINY, **ALL))
    decay, no_decay = param_groups(m, TrainConfig())
    names = {id(p): n for n, p in m.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    for n in names.values():
        if any(k in n for k in ("x0_mix", "unet_skip", "value_embed", "embed_shortcuts", "backout")):
            assert n not in decayed
    assert decay["weight_decay"] > 0 and no_decay["weight_decay"] == 0


def test_every_shortcut_learns():
    m = Transformer(replace(TINY, **ALL))
    with torch.no_grad():
        m.embed_shortcuts.smear.lam.fill_(0.5)  # at 0 its gate's gradient is 0
    idx = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.nn.functional.cross_entropy(m(idx)[:, :-1].flatten(0, 1), idx[:, 1:].flatten()).backward()
    for n, p in m.named_parameters():
        if any(k in n for k in ("x0_mix", "unet_skip", "value_embed", "embed_shortcuts", "backout")):
            assert p.grad is not None and p.grad.abs().max() > 0, n


# ---- training --------------------------------------------------------------------------


def test_a_run_with_every_shortcut_logs_them_and_resumes_bitwise(tmp_path, monkeypatch):
    """Trains, logs each learned value per layer (at step 0: the init), and a run
    interrupted between checkpoints and resumed ends with the uninterrupted run's weights."""
    from test_train import weights_equal
    from train_helpers import config

    from depthlab.metrics import read_metrics
    from depthlab.train import train

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    cfg = config(steps=12, ckpt_every=5, probe_every=6, eval_every=6)
    cfg = replace(cfg, model=replace(cfg.model, n_layers=3, **ALL))
    train(cfg, tmp_path / "full", progress=False)
    probes = read_metrics(tmp_path / "full", "probe")
    first, last = probes[0], probes[-1]
    assert first["x0_mix_resid"] == pytest.approx([1.15, 1.10, 1.05], abs=1e-6)
    assert first["x0_mix_x0"] == pytest.approx([0.20, 0.125, 0.05], abs=1e-6)
    assert first["unet_skip_weight"] == [None, None, 1.0]
    assert first["backout_lambda"] == pytest.approx(0.2) and first["smear_lambda"] == 0.0
    assert first["smear_gate"] == 0.0  # lambda 0 times a sigmoid
    gates = first["value_embed_gate"]  # layers 0 and 2 of 3; 3 sigmoid(~0) at init
    assert gates[1] is None and all(1.5 <= g < 1.6 for g in (gates[0], gates[2]))
    assert last["x0_mix_resid"] != first["x0_mix_resid"]  # learned
    assert last["backout_lambda"] != first["backout_lambda"]

    def interrupt(step, _values):
        if step == 8:
            os.kill(os.getpid(), signal.SIGINT)

    assert train(cfg, tmp_path / "split", progress=False, on_step=interrupt).step == 8
    assert train(cfg, tmp_path / "split", progress=False, resume=True).step == 12
    assert weights_equal(tmp_path / "full", tmp_path / "split")


# ---- the simulator -------------------------------------------------------------------


def test_the_simulator_mixes_x0_as_the_model_does():
    """A toy stack with x0 mixing starts at the input at RMS 1 and mixes it before each
    layer with the model's init (depth 2: 1.15 x + 0.20 x0, then 1.05 x + 0.05 x0); the
    naive row has none, and a residual that widens the stream refuses it."""
    from depthlab.errors import UserError
    from depthlab.probes.simulator import StackRequest, _inputs, token_collapse, wiring

    req = StackRequest(depth=2, residual="plain", x0_mix=True)
    wired = wiring(req.config())
    x, x0 = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 4.0]])
    torch.testing.assert_close(wired.mix(0, 2, x, x0), torch.tensor([[1.75, 3.1]]))
    torch.testing.assert_close(wired.mix(1, 2, x, x0), torch.tensor([[1.2, 2.3]]))
    assert wired.mix(1, 2, x, None) is x
    assert token_collapse(req).stream_rms[0] == pytest.approx(1.0, rel=1e-9)
    rms_in = float(_inputs(req).pow(2).mean().sqrt())
    assert token_collapse(replace(req, x0_mix=False)).stream_rms[0] == pytest.approx(rms_in)
    assert req.naive().x0_mix is False and req.label == "plain+x0"
    with pytest.raises(UserError, match="x0_mix"):
        StackRequest(residual="hc", x0_mix=True)


def test_the_memory_estimate_counts_the_shortcuts():
    from depthlab.memory import estimate, shortcut_floats

    assert shortcut_floats(TINY) == 0
    on = replace(TINY, **ALL)  # L 4, d 24, K*E 24, 2 K/V heads, value embeddings on 1 and 3
    assert shortcut_floats(on) == 2 * 24 * 4 + 24 * 2 + 2 * (3 * 24 + 2) + 3 * 24 + 24 + 2 * 30
    base, more = estimate(TINY, 2, 16, True), estimate(on, 2, 16, True)
    assert more.activations - base.activations == 4 * 32 * shortcut_floats(on)
    # ALL has value_residual on too: its two lambdas on every layer after the first
    assert more.params - base.params == on.shortcut_params + 2 * (on.n_layers - 1)
    assert more.params == sum(p.numel() for p in Transformer(on).parameters())
