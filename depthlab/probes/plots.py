"""Static pictures of the probes for the CLI's --plot (PNG or SVG, matplotlib Agg).

matplotlib is imported inside each function, so the probes themselves never need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from depthlab.errors import UserError

PLAIN, IMPROVED = "#c0392b", "#27ae60"  # the page's colours: naive row red, improved green


def _figure(ncols: int = 1) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(5.5 * ncols, 4), squeeze=False)


def _save(fig: Any, path: str) -> None:
    if Path(path).suffix.lower() not in (".png", ".svg"):
        raise UserError(f"--plot needs a .png or .svg file name, got {path!r}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e}") from None
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def plot_gradflow(plain: Any, improved: Any, path: str) -> None:
    """Per-sublayer gradient (relative to the top) and stream RMS, both rows."""
    r = improved.request
    _naive_and_improved(
        plain, improved, path,
        left=(lambda res: (range(1, len(res.per_layer) + 1), res.per_layer),
              dict(xlabel="sublayer (1 = bottom)", ylabel="gradient norm / top's (ratio)",
                   title=f"gradient reach, N={r.depth}, g={r.gain}, seed {r.seed}")),
        right=(lambda res: (range(len(res.stream_rms)), res.stream_rms),
               dict(xlabel="writes into the stream", ylabel="stream RMS (unit input = 1)",
                    title="residual-stream RMS")))


def plot_sweep(sweep: Any, path: str) -> None:
    fig, ax = _figure()
    a = ax[0][0]
    a.semilogy(sweep.gains, sweep.naive_ratios, "o-", ms=3, color=PLAIN, label="naive")
    a.semilogy(sweep.gains, sweep.ratios, "o-", ms=3, color=IMPROVED, label=sweep.request.label)
    a.axhline(1.0, color="grey", lw=0.8)
    a.set(xlabel="init gain g (weights ~ N(0, g^2/fan_in))", ylabel="bottom / top gradient ratio",
          title=f"the knife edge, N={sweep.request.depth}, seed {sweep.request.seed}")
    a.legend()
    _save(fig, path)


def plot_collapse(plain: Any, improved: Any, path: str) -> None:
    """Each layer's distance from full collapse (log) and the mean pairwise cosine, both rows."""
    r = improved.request
    _naive_and_improved(
        plain, improved, path,
        left=(lambda res: (range(len(res.rel_distance)), res.rel_distance),
              dict(xlabel="attention layers (0 = input)",
                   ylabel="||X - 1 mean(X)^T||_F / ||X||_F (ratio)",
                   title=f"token collapse, N={r.depth}, g={r.gain}, seed {r.seed}")),
        right=(lambda res: (range(len(res.mean_cosine)), res.mean_cosine),
               dict(xlabel="attention layers (0 = input)", ylabel="mean pairwise cosine",
                    title="token similarity")))


def _naive_and_improved(plain: Any, improved: Any, path: str, left: tuple, right: tuple) -> None:
    """Two panels, the naive row red and the improved green in each: `left` (log y) and
    `right` (linear y) are each (what to draw of a result: x, y; the axes' labels)."""
    fig, ax = _figure(2)
    for res, colour, label in ((plain, PLAIN, "naive"), (improved, IMPROVED, improved.request.label)):
        ax[0][0].semilogy(*left[0](res), "o-", ms=3, color=colour, label=label)
        ax[0][1].plot(*right[0](res), "o-", ms=3, color=colour, label=label)
    for a, (_, labels) in zip(ax[0], (left, right), strict=True):
        a.set(**labels)
        a.legend()
    _save(fig, path)


def plot_growth(res: Any, path: str, real: Any = None) -> None:
    fig, ax = _figure(2 if real is not None else 1)
    a = ax[0][0]
    k = range(len(res.measured_rms))
    a.plot(k, res.measured_rms, color=PLAIN, label="measured RMS")
    a.plot(k, res.expected, "--", color="black", label="sqrt(1 + k)")
    a.set(xlabel="independent unit-variance writes k", ylabel="stream RMS (input = 1)",
          title="the residual stream grows")
    a.legend()
    if real is not None:
        b = ax[0][1]
        for row in real.rows:
            b.plot(range(len(row.stream_rms)), row.stream_rms, "o-", ms=3, label=row.label)
        b.set(xlabel="writes into the stream (2 per block)", ylabel="stream RMS (absolute)",
              title="real model at init")
        b.legend(fontsize=7)
    _save(fig, path)
