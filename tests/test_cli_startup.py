"""Commands that need no tensors answer without importing torch (checked in a fresh
interpreter through sys.modules), and the torch-free norms match the model's classes."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthlab.model.norms import LayerNorm, RMSNorm
from depthlab.probes import compare_norms

REPO = Path(__file__).parent.parent
RUN = """
import contextlib, io, json, sys
from depthlab.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "out": out.getvalue()}))
"""


def run_fresh(*argv: str) -> dict:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [
    ["probe", "norms", "3", "4"],
    ["probe", "norms", "3", "4", "--json"],
    ["probe", "paths", "--depth", "2", "--scale", "0.5"],
    ["probe", "paths", "--depth", "64", "--json"],
    ["anatomy", "--list"],
    ["anatomy", "no-such-config"],  # the one-line error, too
    ["probe", "norms", "3", "x"],
    ["experiment", "--list"],
    ["--help"],
])
def test_answers_without_importing_torch(argv):
    result = run_fresh(*argv)
    assert result["torch"] is False, argv
    assert result["code"] == (2 if "x" in argv or "no-such-config" in argv else 0)


EVERY_HELP = """
import argparse, contextlib, io, json, sys
from depthlab.cli import build_parser, main

def commands(parser, path):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield path + [name]
                yield from commands(child, path + [name])

seen = []
for argv in [[]] + list(commands(build_parser(), [])):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv + ["--help"])
        except SystemExit:
            pass
    seen.append(" ".join(argv))
    if "torch" in sys.modules or "usage:" not in out.getvalue():
        break
print(json.dumps({"seen": seen, "torch": "torch" in sys.modules}))
"""


def test_every_commands_help_loads_no_torch():
    """`--help` of depthlab and of every command and subcommand, one after another in one
    fresh interpreter: the first that loads torch (or prints no usage) is the last seen."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", EVERY_HELP], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["torch"] is False, result["seen"][-1]
    assert {"", "train", "probe norms", "model describe", "hf import", "serve"} <= set(result["seen"])


@pytest.mark.slow
def test_the_check_sees_torch_where_a_command_needs_it():
    result = run_fresh("probe", "gradflow", "--depth", "2")
    assert result["code"] == 0 and result["torch"] is True
    result = run_fresh("anatomy", "gpt2")  # parameters are counted on the model itself
    assert result["code"] == 0 and result["torch"] is True and "124,439,808" in result["out"]


VECTORS = [[3, 4], [1], [0, 0, 0], [-2.5, 0.0, 2.5], [1e-8, 2e-8, -3e-8], [1e150, -2e150, 3e150],
           [7, 7, 7, 7.000001], list(range(-50, 51)), [0.1 * i ** 2 - 3 for i in range(37)]]


@pytest.mark.parametrize("x", VECTORS)
@pytest.mark.parametrize("eps", [1e-12, 1e-6, 1e-5, 1.0])
def test_plain_arithmetic_norms_match_the_models_classes(x, eps):
    n = compare_norms(x, eps)
    t = torch.tensor([float(v) for v in x], dtype=torch.float64)
    with torch.no_grad():
        ln_mod, rms_mod = LayerNorm(len(x), eps).double(), RMSNorm(len(x), eps).double()
        ln, rms = ln_mod.reference(t).tolist(), rms_mod.reference(t).tolist()
        # The fused kernels that run in forward() reduce in another order: a few ulps more.
        ln_fused, rms_fused = ln_mod(t).tolist(), rms_mod(t).tolist()
    # compare_norms centres exactly; the float64 formula subtracts a rounded mean, an error
    # of about u * max|x| in each centred value, divided by LayerNorm's sqrt(var + eps)
    u = 2.0**-53
    cancel = 8 * u * max(abs(float(v)) for v in x) / math.sqrt(n.variance + eps)
    assert n.layernorm == pytest.approx(ln, rel=1e-12, abs=1e-300 + cancel)
    assert n.rmsnorm == pytest.approx(rms, rel=1e-12, abs=1e-300)
    assert n.layernorm == pytest.approx(ln_fused, rel=1e-9, abs=1e-12)  # outputs are O(1)
    assert n.rmsnorm == pytest.approx(rms_fused, rel=1e-9, abs=1e-12)
    scale = max(abs(float(v)) for v in x)  # a mean of 0 is rounding noise of this size
    assert n.mean == pytest.approx(t.mean().item(), rel=1e-12, abs=1e-15 * scale)
    assert n.variance == pytest.approx(t.var(unbiased=False).item(), rel=1e-12,
                                       abs=1e-15 * scale**2)
    assert n.rms == pytest.approx(math.sqrt(t.pow(2).mean().item()), rel=1e-12)


# The modules that import without torch: everything a torch-free command, the page's
# server start or a config check needs. torch is imported inside the functions that
# compute (the one rule for in-function imports of torch); a module added here stays so.
TORCH_FREE = [
    "depthlab", "depthlab.atomic", "depthlab.config", "depthlab.errors", "depthlab.locales",
    "depthlab.memory", "depthlab.presets", "depthlab.progress", "depthlab.corpus",
    "depthlab.metrics", "depthlab.rundir", "depthlab.outdir", "depthlab.tokenizer", "depthlab.tokstream",
    "depthlab.bpe_corpus", "depthlab.bpe_train", "depthlab.shards", "depthlab.shard_prepare",
    "depthlab.cli.data_cmd",
    "depthlab.numtext", "depthlab.threads", "depthlab.variants", "depthlab.sigfig",
    "depthlab.cli", "depthlab.cli.anatomy_cmd", "depthlab.cli.common", "depthlab.cli.experiment_cmd",
    "depthlab.cli.generate_cmd", "depthlab.cli.hf_cmd", "depthlab.cli.model_cmd",
    "depthlab.cli.probe_cmd", "depthlab.cli.realmodel_report", "depthlab.cli.run_probe_cmd",
    "depthlab.cli.serve_cmd", "depthlab.cli.table", "depthlab.cli.train_cmd",
    "depthlab.experiments", "depthlab.experiments.registry", "depthlab.experiments.report",
    "depthlab.experiments.runner", "depthlab.experiments.spec", "depthlab.experiments.wording",
    "depthlab.experiments.frontier_readings",
    "depthlab.experiments.speedrun", "depthlab.experiments.speedrun_readings",
    "depthlab.hf", "depthlab.hf.config_map", "depthlab.hf.mapping", "depthlab.hf.mapping_doc",
    "depthlab.probes", "depthlab.probes.anatomy", "depthlab.probes.exact", "depthlab.probes.stages",
    "depthlab.probes.simulator_bounds", "depthlab.probes.jsonsafe",
    "depthlab.web", "depthlab.web.app", "depthlab.web.compute", "depthlab.web.export",
    "depthlab.web.guard", "depthlab.web.lesson", "depthlab.web.runs", "depthlab.web.schemas",
    "depthlab.web.sections", "depthlab.web.server", "depthlab.web.messages",
]
IMPORT_EACH = """
import importlib, json, sys
loaded = None
for name in sys.argv[1:]:
    importlib.import_module(name)
    if "torch" in sys.modules:
        loaded = name
        break
print(json.dumps(loaded))
"""


def test_the_torch_free_modules_import_without_torch():
    """In a fresh interpreter, one after another; the first that loads torch is named."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH, *TORCH_FREE], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) is None


def test_the_torch_free_check_sees_a_module_that_loads_torch():
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH, "depthlab.config", "depthlab.model"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == "depthlab.model"
