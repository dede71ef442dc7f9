"""The arms of residual-frontier: one design each, switched on over the course model, and
the names of their runs (`L{depth}-{arm}`). Shared by the grid (frontier.py) and the
report (frontier_report.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from depthlab.experiments.placement import HIGH_LR
from depthlab.variants import RESIDUAL_SPECS


@dataclass(frozen=True)
class Arm:
    """One design: the overrides that switch it on over the course model."""

    name: str
    label: str
    overrides: tuple[str, ...]
    color: str
    warmup: bool = True  # False: trained without learning-rate warmup (the C8 pair)


# The C8 pair trains in the setting where the norm-placement experiment shows plain Post-LN
# failing: no warmup, plain 0.02 init (DeepNorm brings its own: Xavier-normal, v/o/FFN times
# beta), lr HIGH_LR (5e-3); there plain Post-LN ends on the unigram plateau (3.307, seed 0).
# A scan (2026-12-01; 48 layers, quick's batch, evaluation and probes, 100 steps, no warmup,
# scaled_init=false, one thread; final val loss, unigram 3.3045, "trains" means below 3.264,
# baselines.left_plateau) with DeepNorm's beta applied to the 0.02 init instead of Xavier:
#   lr 5e-4  DeepNorm  3.314 (s0)
#   lr 1e-3  DeepNorm  3.308 (s0)
#   lr 2e-3  DeepNorm  3.307 (s0), 3.200 (s1);  plain Post-LN 2.344 (s0), 2.350 (s1)
#   lr 3e-3  plain Post-LN 3.307 (s0)
#   lr 5e-3  DeepNorm  3.307 (s0);  plain Post-LN 3.307 (s0)
# That DeepNorm stalled at every lr (its input dependence falling below 1e-4 within 25
# steps): beta x 0.02 is about 0.0045 per weight, where the paper's Xavier x beta is about
# 0.02. With the paper's init (model.residual.DeepNormResidual.init_base) DeepNorm at 5e-3
# reached a training loss of 2.63 by step 35, so the pair stays at 5e-3; c8_sentence says
# what the experiment's own runs show.
C8_SETTING = ("model.scaled_init=false", f"train.lr={HIGH_LR:g}")

ARMS: tuple[Arm, ...] = (
    Arm("plain", "plain (Pre-LN)", ("model.residual=plain",), "#1f77b4"),
    Arm("scaled", "scaled 1/sqrt(2L)", ("model.residual=scaled",), "#17becf"),
    Arm("deepnorm", f"DeepNorm (Post-LN, no warmup, lr {HIGH_LR:g})",
        ("model.placement=post", "model.residual=deepnorm", *C8_SETTING), "#2ca02c",
        warmup=False),
    Arm("rezero", "ReZero", ("model.residual=rezero",), "#bcbd22"),
    # LayerNorm Scaling without the 1/sqrt(2L) init: the paper finds the two together weaker
    # and recommends dropping the scaled init (Sun et al. 2025, footnote to the abstract).
    Arm("lns", "LayerNorm Scaling 1/sqrt(l)", ("model.norm_scale=depth", "model.scaled_init=false"),
        "#7f7f7f"),
    Arm("dyt", "DyT instead of the norms", ("model.norm=dyt",), "#aec7e8"),
    Arm("value-residual", "value residual", ("model.value_residual=true",), "#8c564b"),
    Arm("hc", "hyper-connections (n = 4)", ("model.residual=hc", "model.streams=4"), "#ff7f0e"),
    Arm("mhc", "mHC (n = 4)", ("model.residual=mhc", "model.streams=4"), "#9467bd"),
    Arm("attnres", "attention residuals", ("model.residual=attnres",), "#e377c2"),
    Arm("post-ln", f"plain Post-LN, no warmup, lr {HIGH_LR:g} (reference)",
        ("model.placement=post", *C8_SETTING), "#d62728", warmup=False),
)
ARM_BY_NAME = {a.name: a for a in ARMS}
ARM_NAMES = tuple(ARM_BY_NAME)
REFERENCE = "plain"  # every arm is compared with it at the same depth
C8_PAIR = ("deepnorm", "post-ln")  # the lesson's C8 point, at the deepest depth
# The arms that carry copies of the stream (n = 4): their residual's spec widens it.
STREAM_ARMS = tuple(a.name for a in ARMS for o in a.overrides if o.startswith("model.residual=")
                    and RESIDUAL_SPECS[o.partition("=")[2]].widens == "copies")


def arm_name(depth: int, arm: str) -> str:
    return f"L{depth}-{arm}"


def split_arm(name: str) -> tuple[int, str]:
    """`L48-deepnorm` -> (48, "deepnorm")."""
    depth, arm = name.split("-", 1)
    return int(depth[1:]), arm
