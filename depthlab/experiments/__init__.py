"""The lesson's claims as named, reproducible experiments: grids of training (or
init-time) runs whose exported data feed the page, the charts and summary.md.

Imports go one way, each module importing only those before it: spec -> report (charts,
statistics, the files) -> wording, analysis, baselines, mechanism -> one module per
experiment -> registry -> runner. Nothing here imports the page or the CLI."""

from depthlab.experiments.registry import EXPERIMENTS, get_experiment
from depthlab.experiments.report import EXPORT_FILE
from depthlab.experiments.runner import STATUS_FILE, run_experiment
from depthlab.experiments.spec import BUDGETS, Budget, Experiment, RunSpec

__all__ = ["BUDGETS", "EXPERIMENTS", "EXPORT_FILE", "STATUS_FILE", "Budget", "Experiment",
           "RunSpec", "get_experiment", "run_experiment"]
