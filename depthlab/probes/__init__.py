"""Live probes of deep stacks at init, exact arithmetic and model anatomy (LESSON 2, 3, 5).

Every probe is a pure, cached function of a frozen, hashable request and returns a
result with `to_json()`. The functions never change torch's global thread count:
a server should call `use_single_thread()` once at start-up, since these tensors are
small and one thread answers fastest and leaves the other cores to other requests.
"""

import importlib

from depthlab.probes.anatomy import (
    Anatomy,
    anatomy,
    anatomy_of,
    anatomy_of_preset,
    evolution_table,
    shipped_configs,
)
from depthlab.probes.exact import (
    NormComparison,
    PathExpansion,
    compare_norms,
    residual_init_std,
    residual_paths,
)

# The torch-backed probes load on first use (PEP 562), so the exact arithmetic and the
# anatomy of configs answer without waiting for torch.
_LAZY = {
    "depthlab.probes.growth": ("GrowthRequest", "GrowthResult", "RealGrowthResult",
                               "real_growth", "stream_growth"),
    "depthlab.probes.real": ("RealRequest", "RealResult", "real_probe"),
    "depthlab.probes.realmodel": ("probe_run_dir", "realmodel_probes"),
    "depthlab.probes.simulator_bounds": ("MAX_DEPTH", "PAGE_MAX_DEPTH", "SWEEP_GAINS"),
    "depthlab.probes.simulator": ("CollapseResult", "Comparison", "GradResult", "StackRequest", "SweepResult",
                                  "compare", "gain_sweep", "gradient_reach", "mean_cosine",
                                  "rel_distance", "token_collapse"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


def use_single_thread() -> None:
    """One torch thread: what the probes are sized and benchmarked for."""
    import torch

    torch.set_num_threads(1)


__all__ = [
    "MAX_DEPTH", "PAGE_MAX_DEPTH", "SWEEP_GAINS", "Anatomy", "CollapseResult", "Comparison",
    "GradResult",
    "GrowthRequest", "GrowthResult", "NormComparison", "PathExpansion", "RealGrowthResult",
    "RealRequest", "RealResult", "StackRequest", "SweepResult", "anatomy", "anatomy_of",
    "anatomy_of_preset", "compare", "compare_norms", "evolution_table", "gain_sweep", "gradient_reach",
    "mean_cosine", "probe_run_dir", "real_growth", "real_probe",
    "realmodel_probes", "rel_distance",
    "residual_init_std", "residual_paths", "shipped_configs", "stream_growth",
    "token_collapse", "use_single_thread",
]
