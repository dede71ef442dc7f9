"""One-line refusals for numbers that are not numbers: a run whose weights hold NaN or inf
(a diverged run's last save, an edited file) or whose logits overflow would otherwise
print `nan%`, sample from NaN probabilities (torch.multinomial's traceback) or fill a
probe's tables with nan.
"""

from __future__ import annotations

from typing import Any

from depthlab.errors import UserError


def check_finite_weights(model: Any, run: str) -> None:
    """Refuse a model with a non-finite parameter or buffer, naming the first tensor."""
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point():
            bad = int((~t.isfinite()).sum())
            if bad:
                raise UserError(f"{run}: the weights are not finite: tensor {name} holds {bad:,} "
                                f"NaN or inf value(s) of {t.numel():,} (a diverged run? its "
                                "checkpoints/ may hold finite weights)")


def check_finite_logits(logits: Any, run: str, where: str) -> None:
    """Refuse logits holding NaN or inf (weights so large the forward overflows)."""
    bad = int((~logits.isfinite()).sum())
    if bad:
        raise UserError(f"{run}: the logits {where} are not finite ({bad:,} NaN or inf of "
                        f"{logits.numel():,}); the weights overflow the forward pass")
