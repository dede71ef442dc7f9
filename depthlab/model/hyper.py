"""Hyper-connections: n copies of the residual stream instead of one.

The stream H is [B, T, n, D]. Each write (attention or FFN) reads one mix of the n
copies, and writes its output back into every copy with a weight, while the copies
are also mixed with each other. Two designs, one module each, with the residual
registry's interface (depthlab.model.residual): `open` copies the embedding n times,
`read` is the weighted collapse the sublayer sees, `forward` is the new H.

HC  (`residual=hc`; Zhu et al., "Hyper-Connections", ICLR 2025, arXiv 2409.19606,
    eqs. 1-13 and Appendix J, Algorithm 2). Per write, an (n+1) x (n+1) matrix
        HC = [[0, B], [A_m, A_r]],   A_m in R^{n x 1}, A_r in R^{n x n}, B in R^{1 x n}
    and with h_0 = A_m^T H (the sublayer input, "width connection"):
        H <- B^T F(h_0) + A_r^T H                          ("depth connection")
    Dynamic HC adds input-dependent parts to the static matrices (eqs. 10-13):
        A(H) = [A_m | A_r] + s_a * tanh(norm(H) W_a),   W_a in R^{D x (n+1)}
        B(H) = B           + s_b * tanh(norm(H) W_b),   W_b in R^{D}
    Init (eq. 14, "Pre-Norm equivalent"): A_m = e_{k mod n} for the k-th write,
    A_r = I, B = 1, W_a = W_b = 0, s_a = s_b = 0.01. Then every write lands in all
    copies and the copies stay equal, each the Pre-Norm stream. The model's final
    read is the sum of the copies (Algorithm 1, line 11). norm is a LayerNorm without
    affine here: its scale would be absorbed by W (diag(g) W is another W).

mHC (`residual=mhc`; Xie et al., DeepSeek-AI, "mHC: Manifold-Constrained
    Hyper-Connections", arXiv 2512.24880, as shipped in DeepSeek-V4 and in
    transformers' `DeepseekV4HyperConnection`). All three maps are dynamic, computed
    from the whole flattened, RMS-normalised stream x = RMSNorm(vec H) in R^{nD}:
        [p, q, R] = W x                       W in R^{(2+n)n x nD}
        pre  = sigmoid(s_1 p + b_pre) + eps               (collapse weights, n)
        post = 2 sigmoid(s_2 q + b_post)                   (write weights, n)
        comb = Sinkhorn(softmax_rows(s_3 R + b_res) + eps) (n x n, doubly stochastic)
        h_0 = sum_j pre_j H_j,   H <- post F(h_0) + comb^T H
    Sinkhorn-Knopp alternates column and row normalisation (20 iterations) so that
    comb's rows and columns sum to 1: comb lies on the Birkhoff polytope, a product
    of such matrices is again doubly stochastic, so the mixing over depth can neither
    blow up nor vanish (the paper's "Amax gain magnitude" stays near 1; see
    depthlab.probes.mixing). Init as transformers': W ~ N(0, init_std), b = 0,
    s = 1, so pre ~ 1/2, post ~ 1, comb ~ uniform. The model's final read is the sum
    of the copies, as in HC (DeepSeek-V4 learns one more sigmoid-weighted collapse
    there, `DeepseekV4HyperHead`; the sum keeps every write's module alike, with no
    parameters that only the last one would use).

The mixing weights come from the stream each write reads. `read` computes them and
one batched product M H, M = [A_m | A_r]^T (HC) or [pre | comb]^T (mHC), gives both
the sublayer's input (row 0) and the mixed copies (rows 1..n); `forward` adds the
weighted write to the copies it kept when handed the same stream tensor (Block.forward
passes the same `x` to both), and recomputes them otherwise. Hook points show them:
`*_residual.hook_alpha` / `hook_beta` (HC), `hook_pre` / `hook_post` / `hook_comb` (mHC).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from depthlab.hooks import HookPoint
from depthlab.model.residual_base import Residual

SINKHORN_ITERS = 20  # DeepSeek-V4's hc_sinkhorn_iters
HC_EPS = 1e-6  # DeepSeek-V4's hc_eps
DYNAMIC_SCALE_INIT = 0.01  # s_a, s_b at init (Zhu et al., Algorithm 2)


def sinkhorn(m: torch.Tensor, iters: int = SINKHORN_ITERS, eps: float = HC_EPS) -> torch.Tensor:
    """Sinkhorn-Knopp on the last two axes of a positive matrix: one column
    normalisation, then `iters - 1` rounds of row and column normalisation (the order
    of `DeepseekV4HyperConnection`, whose input is already row-normalised by softmax).

    Each step is y = x / (sum of x along one axis + eps). The matrix axes are moved to
    the front, so the sums run over contiguous rows of all tokens at once, and the
    backward is written out (`_Sinkhorn`): together about 5x faster on a CPU than
    autograd through 39 small steps on [..., n, n]."""
    return _Sinkhorn.apply(m, iters, eps)


def _sinkhorn_axes(iters: int) -> list[int]:
    """The axis each step sums over, with the matrix axes in front: 0 columns, 1 rows."""
    return [0] + [1, 0] * (iters - 1)


class _Sinkhorn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, m: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
        m = m.movedim((-2, -1), (0, 1)).contiguous()  # [n, n, ...]
        ctx.axes = _sinkhorn_axes(iters)
        saved = []
        for axis in ctx.axes:
            total = m.sum(dim=axis, keepdim=True) + eps
            m = m / total
            saved += [m, total]
        ctx.save_for_backward(*saved)
        return m.movedim((0, 1), (-2, -1))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # y = x / s with s = sum(x) + eps along one axis: dx = (dy - sum(dy * y)) / s.
        g = grad.movedim((-2, -1), (0, 1)).contiguous()
        saved = ctx.saved_tensors
        for k in reversed(range(len(ctx.axes))):
            y, total = saved[2 * k], saved[2 * k + 1]
            g = (g - (g * y).sum(dim=ctx.axes[k], keepdim=True)) / total
        return g.movedim((0, 1), (-2, -1)), None, None


class _Streams(Residual):
    """What both designs share: n copies opened from the embedding, summed at the end,
    and the mixed copies of one stream kept from `read` for `forward`."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self._last: tuple[torch.Tensor, tuple[torch.Tensor, ...]] | None = None

    def open(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T, n, D]: n equal copies (H^0 = (h^0 ... h^0)^T)."""
        return x.unsqueeze(-2).expand(*x.shape[:-1], self.n, x.shape[-1]).contiguous()

    def close(self, stream: torch.Tensor) -> torch.Tensor:
        """[B, T, n, D] -> [B, T, D]: the sum of the copies (Zhu et al., Algorithm 1)."""
        return stream.sum(dim=-2)

    def extra_repr(self) -> str:
        shapes = ", ".join(f"{name}={list(p.shape)}" for name, p in self.named_parameters())
        return f"streams={self.n}, {shapes}"

    def mixing(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(M [B, T, n+1, n], write weights [B, T, n]): row 0 of M collapses the copies
        into the sublayer's input, rows 1..n are the residual mixing (transposed)."""
        raise NotImplementedError

    def _mix(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """M H in one batched product: [input; mixed copies] [B, T, n+1, D], and the
        write weights."""
        m, write_weights = self.mixing(stream)
        return m @ stream, write_weights

    def read(self, stream: torch.Tensor) -> torch.Tensor:
        """The sublayer's input [B, T, D]; the mixed copies wait for `forward`."""
        mixed, write_weights = self._mix(stream)
        self._last = (stream, (mixed, write_weights))
        return mixed[..., 0, :]

    def forward(self, stream: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        """The new copies: write weights x F(h_0) + the mixed copies."""
        last, self._last = self._last, None
        mixed, write_weights = last[1] if last is not None and last[0] is stream else (
            self._mix(stream))
        return torch.addcmul(mixed[..., 1:, :], write_weights.unsqueeze(-1), write.unsqueeze(-2))


class HyperConnection(_Streams):
    """`residual=hc`: static + dynamic hyper-connections (Zhu et al. 2025, Algorithm 2)."""

    def __init__(self, d_model: int, n: int, eps: float) -> None:
        super().__init__(n)
        self.eps = eps
        self.static_alpha = nn.Parameter(torch.empty(n, n + 1))  # [A_m | A_r]
        self.static_beta = nn.Parameter(torch.empty(n))  # B
        self.dynamic_alpha_fn = nn.Parameter(torch.empty(d_model, n + 1))  # W_a
        self.dynamic_alpha_scale = nn.Parameter(torch.empty(()))  # s_a
        self.dynamic_beta_fn = nn.Parameter(torch.empty(d_model))  # W_b
        self.dynamic_beta_scale = nn.Parameter(torch.empty(()))  # s_b
        self.hook_alpha, self.hook_beta = HookPoint(), HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The paper's Pre-Norm-equivalent init (eq. 14): A_m = e_{k mod n}, A_r = I,
        B = 1, dynamic parts 0."""
        with torch.no_grad():
            self.static_alpha.zero_()
            self.static_alpha[self.write_index % self.n, 0] = 1.0
            self.static_alpha[:, 1:] = torch.eye(self.n)
            self.static_beta.fill_(1.0)
            self.dynamic_alpha_fn.zero_()
            self.dynamic_beta_fn.zero_()
            self.dynamic_alpha_scale.fill_(DYNAMIC_SCALE_INIT)
            self.dynamic_beta_scale.fill_(DYNAMIC_SCALE_INIT)

    def mixing(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha^T [B, T, n+1, n] and beta [B, T, n] for H = `stream` [B, T, n, D]
        (W_a and W_b applied as one [n+2, D] linear: about 2x faster on a CPU than
        multiplying by the tall [D, n+2] matrix)."""
        fns = torch.cat([self.dynamic_alpha_fn.t(), self.dynamic_beta_fn.unsqueeze(0)])
        normed = F.layer_norm(stream, stream.shape[-1:], eps=self.eps)
        dynamic = torch.tanh(F.linear(normed, fns))
        alpha = self.hook_alpha(self.static_alpha + self.dynamic_alpha_scale * dynamic[..., :-1])
        beta = self.hook_beta(self.static_beta + self.dynamic_beta_scale * dynamic[..., -1])
        return alpha.transpose(-1, -2), beta


class ManifoldHyperConnection(_Streams):
    """`residual=mhc`: hyper-connections with a doubly stochastic residual mixing
    matrix (Xie et al. 2025/26; transformers' `DeepseekV4HyperConnection`)."""

    def __init__(self, d_model: int, n: int, eps: float, init_std: float) -> None:
        super().__init__(n)
        self.eps, self.init_std = eps, init_std
        size = (2 + n) * n  # pre (n), post (n), comb (n * n)
        self.fn = nn.Parameter(torch.empty(size, n * d_model))
        self.base = nn.Parameter(torch.empty(size))
        self.scales = nn.Parameter(torch.empty(3))  # transformers: `scale`
        self.hook_pre, self.hook_post, self.hook_comb = HookPoint(), HookPoint(), HookPoint()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """As transformers' DeepseekV4PreTrainedModel: fn ~ N(0, init_std), base 0, scales 1."""
        nn.init.normal_(self.fn, 0.0, self.init_std)
        nn.init.zeros_(self.base)
        nn.init.ones_(self.scales)

    def weights(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """pre [B, T, n], post [B, T, n] and comb [B, T, n, n] for H = `stream`.

        RMSNorm(x) W is computed as (x W) / rms(x): the same numbers without writing
        out the normalised copy of the wide stream."""
        n = self.n
        flat = stream.flatten(-2)
        inv_rms = torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.eps)
        pre_w, post_w, comb_w = (F.linear(flat, self.fn) * inv_rms).split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.base.split([n, n, n * n])
        pre = torch.sigmoid(pre_w * self.scales[0] + pre_b) + HC_EPS
        post = 2 * torch.sigmoid(post_w * self.scales[1] + post_b)
        comb = torch.softmax(comb_w.unflatten(-1, (n, n)) * self.scales[2] + comb_b.view(n, n),
                             dim=-1) + HC_EPS
        comb = sinkhorn(comb)
        return self.hook_pre(pre), self.hook_post(post), self.hook_comb(comb)

    def mixing(self, stream: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[pre; comb^T] [B, T, n+1, n] and post [B, T, n]."""
        pre, post, comb = self.weights(stream)
        return torch.cat([pre.unsqueeze(-2), comb.transpose(-1, -2)], dim=-2), post
