"""The CLI's tables: every column lines up for every value and is named in a legend line;
the no-toggle note, --plot's message and the budgets table."""

import itertools
import re

import pytest

from depthlab.cli import main
from depthlab.cli.table import legend, table
from depthlab.config import RESIDUALS
from depthlab.experiments import BUDGETS, EXPERIMENTS
from depthlab.presets import PRESETS
from depthlab.probes import shipped_configs
from depthlab.probes.simulator_bounds import NORMS
from depthlab.variants import RESIDUAL_SPECS, keys_where

# every pair the simulator draws (a residual that allows no norm, nGPT, only without one)
TOGGLES = [["--residual", residual, "--norm", norm]
           for residual, norm in itertools.product(RESIDUALS, NORMS)
           if norm == "none" or not RESIDUAL_SPECS[residual].needs_no_norm]


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def tables(out: str) -> list[tuple[list[str], list[str]]]:
    """(table lines, legend names) for every legend in the output. A table is the run of
    lines just above its legend whose first cell-split has the header's cell count."""
    lines = out.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("columns: "):
            continue
        text = line.strip()
        j = i + 1
        while j < len(lines) and lines[j].startswith(line[:len(line) - len(line.lstrip())] + "  ") \
                and not lines[j].lstrip().startswith("columns: "):
            text += " " + lines[j].strip()
            j += 1
        names = set()
        for part in text.removeprefix("columns: ").split("; "):
            if " = " in part:
                names.update(n.strip() for n in part.split(" = ", 1)[0].split(", "))
        block = []
        k = i - 1
        while k >= 0 and lines[k].strip() and not lines[k].startswith(("columns", "no toggle")):
            block.insert(0, lines[k])
            k -= 1
        # The header is the first line with as many cells as the last row.
        width = len(cells(block[-1]))
        while block and len(cells(block[0])) != width:
            block.pop(0)
        found.append((block, names))
    return found


def check(out: str, n_tables: int, ragged_last: bool = False) -> None:
    found = tables(out)
    assert len(found) == n_tables, out
    for block, names in found:
        header = cells(block[0])
        for column in header:
            explained = column in names or all(w in names for w in column.split(" "))
            assert explained or column in ("generation", "model", "name", "budget", "what for",
                                           "question"), (column, names)
        assert len(block) >= 2
        if ragged_last:  # a left-aligned text column last: its start lines up
            start = block[0].index(header[-1])
            assert all(line[start - 2:start] == "  " and line[start] != " " for line in block)
        else:  # right-aligned last column: every line ends at the same place
            assert len({len(line) for line in block}) == 1, block
        assert all(len(cells(line)) == len(header) for line in block[1:]), block


@pytest.mark.parametrize("toggles", TOGGLES, ids=lambda t: f"{t[1]}+{t[3]}")
def test_probe_tables_align_and_explain_every_column(capsys, toggles):
    for depth, gain in ((1, 0.05), (12, 0.5), (33, 10.0)):
        stack = ["--depth", str(depth), "--gain", str(gain), *toggles]
        assert main(["probe", "gradflow", *stack]) == 0
        check(capsys.readouterr().out, 2)
        for ffn in ([], ["--ffn"]):
            assert main(["probe", "collapse", *stack, *ffn]) == 0
            check(capsys.readouterr().out, 1)
    assert main(["probe", "gradflow", "--sweep", "--depth", "64", *toggles]) == 0
    check(capsys.readouterr().out, 1)


@pytest.mark.parametrize("argv, n", [
    (["probe", "growth", "--writes", "1"], 1),
    (["probe", "growth", "--writes", "1000", "--real", "--preset", "tiny", "--tokens", "4"], 2),
    (["probe", "paths", "--depth", "2", "--scale", "-0.5"], 2),
    (["probe", "paths", "--depth", "64", "--scale", "3", "--x0=-1e6"], 1),
    (["anatomy", "--evolution"], 1),
    *((["anatomy", name], 2) for name in shipped_configs()),  # data flow, components
    *((["anatomy", "--preset", name], 2) for name in PRESETS),
])
def test_other_tables_align_and_explain_every_column(capsys, argv, n):
    assert main(argv) == 0
    check(capsys.readouterr().out, n)


def test_probe_run_tables_align_and_explain_every_column(tmp_path, capsys):
    import torch

    from depthlab.model import Transformer
    from depthlab.rundir import save_weights, write_config

    torch.manual_seed(0)
    cfg = PRESETS["tiny"]()
    write_config(tmp_path, cfg)
    save_weights(tmp_path, Transformer(cfg.model))
    assert main(["probe", "run", str(tmp_path), "--ids", "1,2,3,4,5"]) == 0
    check(capsys.readouterr().out, 7)  # stream, attention, massive, lens, contributions, gradient, skip


def test_evolution_table_holds_the_zero_centred_norm_in_its_column(capsys):
    assert main(["anatomy", "--evolution"]) == 0
    (block, _), = tables(capsys.readouterr().out)
    anchor = next(line for line in block if "lesson-anchor" in line)
    assert "pre-rmsnorm_zero_centered" in cells(anchor)


def test_without_switches_one_column_and_a_note(capsys):
    assert main(["probe", "gradflow", "--depth", "32", "--gain", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "the improved stack equals the naive one" in out
    per_layer = tables(out)[1][0]
    assert cells(per_layer[0]) == ["l", "naive"]
    assert main(["probe", "gradflow", "--depth", "32", "--gain", "0.5", "--residual"]) == 0
    out = capsys.readouterr().out
    assert "equals the naive one" not in out
    assert cells(tables(out)[1][0][0]) == ["l", "naive", "plain"]
    assert main(["probe", "collapse", "--depth", "4", "--residual", "scaled", "--norm",
                 "rmsnorm"]) == 0
    assert cells(tables(capsys.readouterr().out)[0][0][0]) == [
        "layer", "naive r", "naive cos", "scaled+rmsnorm r", "scaled+rmsnorm cos"]
    assert main(["probe", "collapse", "--depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "equals the naive one" in out and cells(tables(out)[0][0][0]) == [
        "layer", "naive r", "naive cos"]


def test_plot_says_where_it_wrote(tmp_path, capsys):
    path = tmp_path / "reach.svg"
    assert main(["probe", "gradflow", "--depth", "4", "--plot", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert path.is_file() and err.strip() == f"depthlab: wrote the plot to {path}"
    assert out.startswith("{")  # the message stays off stdout, so --json still parses


def test_budgets_are_a_table(capsys):
    assert main(["experiment", "--list"]) == 0
    out = capsys.readouterr().out
    check(out, 1, ragged_last=True)
    (block, _), = tables(out)
    assert [cells(line)[0] for line in block[1:]] == list(BUDGETS)
    quick = next(cells(line) for line in block if line.strip().startswith("quick"))
    b = BUDGETS["quick"]
    assert quick[1:5] == [str(b.steps), f"{b.batch_size} x {b.seq_len}", str(b.seeds),
                          f"{b.shallow}, {b.deep}"]
    assert all(name in out for name in EXPERIMENTS)


def test_table_widths_come_from_the_cells():
    lines = table(["a", "long name"], [("x" * 12, 1), ("y", -1234567.5)], left={0})
    assert lines == ["  a              long name",
                     "  xxxxxxxxxxxx           1",
                     "  y             -1234567.5"]
    with pytest.raises(ValueError):
        table(["a"], [(1, 2)])
    wrapped = legend(*[(f"c{i}", "a long explanation of the column") for i in range(6)])
    assert len(wrapped) > 1 and all(len(line) <= 100 for line in wrapped)
    assert wrapped[0].startswith("  columns: c0 = ")


@pytest.mark.parametrize("residual", keys_where(lambda s: s.needs_no_norm))
def test_a_norm_on_a_norm_free_residual_is_one_line(capsys, residual):
    assert main(["probe", "gradflow", "--residual", residual, "--norm", "rmsnorm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"norm must be none with residual={residual}" in err[0]
