"""The data flow of a model, stage by stage: what each stage outputs for T tokens and
the parameters it holds (per layer and in all), for `Anatomy.stages` and the page.

Parameters are read from the model code on the meta device, by name
(`depthlab.model.summary.stage_of`); shapes are closed forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from depthlab.config import ModelConfig

if TYPE_CHECKING:
    from depthlab.model.summary import ParameterCount

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Stage:
    """One step of the data flow: what it outputs for T tokens, the parameters it holds."""

    key: str  # embedding | positions | attn_norm | attention | linear_attention | attn_residual
    #           | ffn_norm | ffn | ffn_residual | final_norm | lm_head | vision | mtp
    shape: Shape
    params: int  # all copies together (layers x params_per_layer inside the blocks)
    layers: int | None = None  # how many blocks hold it; None: once, outside the blocks
    params_per_layer: int | None = None
    tied: bool = False  # lm_head: the embedding matrix read again, no parameters of its own
    label: str = ""  # its output's name in Anatomy.shapes ("attention write"); "": not listed
    inner: tuple[tuple[str, Shape], ...] = ()  # shapes inside it (q_proj, scores, ffn hidden)

    def to_json(self) -> dict:
        return {"key": self.key, "shape": list(self.shape), "layers": self.layers,
                "params_per_layer": self.params_per_layer, "params": self.params,
                "tied": self.tied,
                "inner": [{"stage": name, "shape": list(sh)} for name, sh in self.inner]}


def q_width(m: ModelConfig) -> int:
    return m.n_heads * m.head_size * (2 if m.attn_gate else 1)


def dense_stages(m: ModelConfig, T: int, params: dict[str, int],
                 rotated: int | None = None, totals: dict[str, int] | None = None,
                 ) -> tuple[Stage, ...]:
    """The data flow of a model whose blocks are alike; `params` per top-level stage and
    per block stage (one block). `totals`: a block stage's parameters over all blocks where
    they differ from L x one block's (value_residual: block 0 has no mix of its own).
    `rotated`: head dimensions RoPE turns (all of them)."""
    d, H, K, E, L = m.d_model, m.n_heads, m.kv_heads, m.head_size, m.n_layers

    def block(key: str, label: str = "", inner: tuple = ()) -> Stage:
        n = params.get(key, 0)
        total = n * L if totals is None else totals.get(key, 0)
        return Stage(key, (T, d), total, L, n, label=label, inner=inner)

    attn_inner = (("q_proj (query" + (" | gate)" if m.attn_gate else ")"), (T, q_width(m))),
                  ("k_proj", (T, K * E)), ("v_proj", (T, K * E)),
                  ("attention scores", (H, T, T)), ("attention output (o_proj in)", (T, H * E)))
    learned = m.position == "learned"
    stages = [Stage("embedding", (T, d), params.get("embedding", 0), label="embedding"),
              Stage("positions", (T, d) if learned else (T, (rotated or m.rotary_dim) // 2),
                    params.get("positions", 0))]
    for sub, label, inner in (("attention", "attention write", attn_inner),
                              ("ffn", "ffn write", (("ffn hidden", (T, m.ffn_hidden)),))):
        prefix = "attn" if sub == "attention" else "ffn"
        core = [block(sub, label, inner)]
        norm = [block(f"{prefix}_norm")] if m.norm != "none" else []
        res = [block(f"{prefix}_residual")] if m.residual != "none" else []
        stages += {"post": core + res + norm, "output": core + norm + res}.get(
            m.placement, norm + core + res)
    if "final_norm" in params:
        stages.append(Stage("final_norm", (T, d), params["final_norm"]))
    stages.append(Stage("lm_head", (T, m.vocab_size), params.get("lm_head", 0),
                        tied=m.tie_embeddings, label="logits"))
    return tuple(stages)


def param_counts(m: ModelConfig) -> ParameterCount:
    """`model describe`'s count (depthlab.model.summary.count_parameters), so the page's
    anatomy and the CLI cannot disagree. torch is imported here, not with the module, so
    listing or validating configs does not wait for it."""
    from depthlab.model.summary import count_parameters

    return count_parameters(m)
