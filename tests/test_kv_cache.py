"""KV cache and token positions: cached generation gives exactly the uncached tokens, and
attention at any position offset (per batch row) matches a full forward pass."""

from dataclasses import replace

import pytest
import torch

from depthlab.generate import generate
from depthlab.model import Transformer
from depthlab.model.attention import KVCache
from depthlab.presets import get_preset

# Learned positions (gpt2, vaswani2017 with Post-LN), GQA + QK-norm (qwen3), zero-centred
# norm + output gate (qwen_next), output-norm placement (olmo2), the course model, and
# Gated DeltaNet layers beside gated attention (qwen3_5: conv and delta-rule states).
PRESETS = ["course", "gpt2", "vaswani2017", "llama", "qwen3", "qwen_next", "olmo2", "qwen3_5"]


def small(preset: str, seed: int, **changes) -> Transformer:
    cfg = get_preset(preset).model
    sizes = {"vocab_size": 97, "context_len": 48, "d_model": 32, "n_heads": 4, "init_std": 0.3}
    cfg = replace(cfg, **(sizes | changes))
    torch.manual_seed(seed)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # trained-looking weights: norm scales away from their init
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("seed", [0, 11])
def test_greedy_tokens_are_identical_with_and_without_the_cache(preset, seed):
    model = small(preset, seed)
    prompt = torch.randint(0, 97, (7,), generator=torch.Generator().manual_seed(seed)).tolist()
    # 60 tokens run past context_len = 48, so the window-recompute phase is covered too.
    with_cache = generate(model, prompt, 60, greedy=True, use_cache=True)
    without = generate(model, prompt, 60, greedy=True, use_cache=False)
    assert with_cache == without


@pytest.mark.parametrize("preset", PRESETS)
def test_sampling_with_a_seed_is_identical_with_and_without_the_cache(preset):
    model = small(preset, 3)
    a = generate(model, [5, 6, 7], 60, temperature=0.8, top_k=20, seed=4, use_cache=True)
    b = generate(model, [5, 6, 7], 60, temperature=0.8, top_k=20, seed=4, use_cache=False)
    assert a == b
    assert len(set(a)) > 5  # a varied stream, so equality is not a coincidence


@pytest.mark.parametrize("preset", ["course", "gpt2", "qwen_next", "qwen3_5"])
def test_cached_chunks_reproduce_the_full_forward_pass(preset):
    model = small(preset, 5)
    idx = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache(model.cfg, 2, 48, torch.float32, "cpu")
        parts = [model(idx[:, a:b], cache=cache) for a, b in ((0, 9), (9, 10), (10, 20))]
    assert cache.length == 20
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("preset", ["course", "gpt2"])
def test_positions_with_a_per_row_offset_match_a_shifted_sequence(preset):
    """Row r of a batch at positions offset_r.. computes what the same tokens compute
    after offset_r earlier tokens, seen only through positions (RoPE or learned)."""
    model = small(preset, 2)
    idx = torch.randint(0, 97, (3, 10), generator=torch.Generator().manual_seed(2))
    offsets = torch.tensor([0, 4, 17])
    positions = offsets[:, None] + torch.arange(10)
    with torch.no_grad():
        batched = model(idx, positions=positions)
        for r in range(3):
            alone = model(idx[r:r + 1], positions=positions[r])
            torch.testing.assert_close(batched[r:r + 1], alone, atol=1e-5, rtol=1e-5)
        at_zero = model(idx[2:3])[0]
    # RoPE sees only distances, so a whole row shifted is unchanged; learned positions differ.
    shifted_differs = not torch.allclose(batched[2], at_zero, atol=1e-3)
    assert shifted_differs == (model.cfg.position == "learned")


def test_rope_scores_depend_only_on_the_distance_between_positions():
    model = small("course", 4, n_layers=1)
    idx = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        at_zero = model(idx)
        at_hundred = model(idx, positions=torch.arange(100, 112))
    torch.testing.assert_close(at_zero, at_hundred, atol=1e-4, rtol=1e-4)


def test_hooks_see_the_pattern_over_cached_and_new_tokens():
    model = small("course", 6)
    idx = torch.randint(0, 97, (1, 8), generator=torch.Generator().manual_seed(4))
    cache = KVCache(model.cfg, 1, 48, torch.float32, "cpu")
    with torch.no_grad():
        model(idx[:, :5], cache=cache)
        logits, acts = model.run_with_cache(idx[:, 5:], names=["blocks.0.attn.hook_pattern"],
                                            cache=cache)
        full = model(idx)
    pattern = acts["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (1, 4, 3, 8)  # 3 new queries over 5 cached + 3 new keys
    assert torch.all(pattern[0, :, 0, 6:] == 0) and torch.all(pattern[0, :, 1, 7:] == 0)
    torch.testing.assert_close(logits, full[:, 5:], atol=2e-5, rtol=1e-4)


def test_learned_positions_refuse_a_position_past_the_table():
    model = small("gpt2", 0)
    with pytest.raises(ValueError, match="context_len=48"):
        model(torch.zeros(1, 4, dtype=torch.long), positions=torch.tensor([45, 46, 47, 48]))


def test_a_full_cache_says_so():
    model = small("course", 0)
    cache = KVCache(model.cfg, 1, 6, torch.float32, "cpu")
    with torch.no_grad(), pytest.raises(ValueError, match="holds 6 tokens"):
        model(torch.zeros(1, 7, dtype=torch.long), cache=cache)


def test_generate_sizes_the_cache_to_the_request_not_the_context(monkeypatch):
    import depthlab.generate as gen

    sizes = []

    class Recording(KVCache):
        def __init__(self, cfg, batch, capacity, dtype, device):
            sizes.append(capacity)
            super().__init__(cfg, batch, capacity, dtype, device)

    monkeypatch.setattr(gen, "KVCache", Recording)
    model = small("course", 1, context_len=4096)
    assert len(generate(model, [1, 2, 3], 20, greedy=True)) == 20
    assert sizes == [23]


def test_a_model_trains_after_generating():
    # generate runs in inference mode; the RoPE table it builds is kept on the model and
    # must still be usable by a later training backward.
    model = small("course", 2).train()
    generate(model, [1, 2, 3], 5, greedy=True)
    idx = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(0))
    model(idx).logsumexp(-1).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
