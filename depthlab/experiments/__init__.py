"""The lesson's claims as named, reproducible experiments: grids of training (or
init-time) runs whose exported data feed the page, the charts and summary.md."""

from depthlab.errors import UserError
from depthlab.experiments.catalog import EXPERIMENTS
from depthlab.experiments.runner import EXPORT_FILE, STATUS_FILE, run_experiment
from depthlab.experiments.spec import BUDGETS, Budget, Experiment, RunSpec


def get_experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise UserError(f"unknown experiment {name!r}; choose one of: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


__all__ = ["BUDGETS", "EXPERIMENTS", "EXPORT_FILE", "STATUS_FILE", "Budget", "Experiment",
           "RunSpec", "get_experiment", "run_experiment"]
