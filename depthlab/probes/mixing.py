"""Why mHC constrains the residual mixing matrix: the composite gain over depth.

With hyper-connections the n copies of the stream pass through one mixing matrix per
write (HC's A_r^T, mHC's comb^T), so after L writes the part of the input that survives
on the residual path is their product. Its size is what the mHC paper plots as the
"Amax gain magnitude" (Xie et al., DeepSeek-AI, arXiv 2512.24880, Fig. 3 and 7): the
largest absolute row sum or column sum of the product, the larger of the forward
(infinity-norm) and backward (1-norm) gains. Unconstrained HC matrices near the
identity multiply up exponentially with depth; doubly stochastic ones (rows and
columns summing to 1, projected by Sinkhorn-Knopp) have a product that is doubly
stochastic again, so the gain stays exactly 1 for nonnegative entries.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from depthlab.model.hyper import sinkhorn


def composite_gain(mixing_matrices: Sequence[torch.Tensor]) -> float:
    """max(largest |row sum|, largest |column sum|) of M_1 M_2 ... M_L (in float64).

    Row sums: the forward gain of the stream through the residual path; column sums:
    the backward gain of the gradient. 1 for the identity and for any product of
    doubly stochastic matrices.
    """
    if not mixing_matrices:
        raise ValueError("composite_gain needs at least one mixing matrix")
    product = mixing_matrices[0].double()
    for m in mixing_matrices[1:]:
        product = product @ m.double()
    rows = product.sum(dim=-1).abs().max()
    cols = product.sum(dim=-2).abs().max()
    return float(torch.maximum(rows, cols))


def gains_over_depth(mixing_matrices: Sequence[torch.Tensor]) -> list[float]:
    """composite_gain of the first 1, 2, ..., L matrices: the curve the page draws."""
    gains, product = [], None
    for m in mixing_matrices:
        product = m.double() if product is None else product @ m.double()
        gains.append(composite_gain([product]))
    return gains


def random_mixing(n: int, depth: int, spread: float, seed: int,
                  constrained: bool) -> list[torch.Tensor]:
    """`depth` toy n x n residual mixing matrices: the identity plus N(0, spread) noise,
    as HC learns them (unconstrained, `constrained=False`), or the same logits made
    doubly stochastic as mHC does (softmax over rows, then Sinkhorn-Knopp, 20 iterations)."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.eye(n, dtype=torch.float64) + spread * torch.randn(
        depth, n, n, generator=gen, dtype=torch.float64)
    if not constrained:
        return list(raw)
    return list(sinkhorn(torch.softmax(raw, dim=-1)))
