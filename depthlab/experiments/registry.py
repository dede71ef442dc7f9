"""The experiments, in the order the CLI lists them, the page shows them and
scripts/standard_results.sh runs them.

Each experiment is one module of this package that defines
`EXPERIMENT = Experiment(name, switches, grid, analyze)` and keeps its sentences in
depthlab/locales/<lang>/experiments.json under `experiments.<name>.`; adding one is that
module, its sentences and its name in MODULES.
"""

from __future__ import annotations

from importlib import import_module

from depthlab.errors import UserError
from depthlab.experiments.spec import Experiment

MODULES = ("residual", "init_gradients", "stream_rms", "placement", "norm_type", "attn_gate",
           "frontier", "speedrun", "hybrid")


def load(modules: tuple[str, ...] = MODULES) -> dict[str, Experiment]:
    """name -> Experiment, from each module's EXPERIMENT; names must be unique."""
    found: dict[str, Experiment] = {}
    for module in modules:
        exp = import_module(f"{__package__}.{module}").EXPERIMENT
        if exp.name in found:
            raise ValueError(f"experiment {exp.name!r} is defined twice (module {module})")
        found[exp.name] = exp
    return found


EXPERIMENTS: dict[str, Experiment] = load()


def get_experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise UserError(f"unknown experiment {name!r}; choose one of: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
