"""Where depthlab imports (docs/architecture.md, "Imports"): at module level, except

  (a) a heavy or optional package of HEAVY, imported inside the function that needs it
      by a module that does not load that package when it is imported (so the module
      stays cheap: `depthlab --help` and the torch-free commands load no torch);
  (b) a depthlab module that loads a HEAVY package the importing module does not load
      (the same reason, one step removed: the trainer inside a torch-free command);
  (c) an import that would close a circle at module level, named in CYCLES.

Read with `ast` from every module; "loads" is the closure of the module-level imports
(a package's __init__ runs before any of its modules, so it counts; a name a package
exports lazily counts as the module it loads), skipping
`if TYPE_CHECKING:` blocks. The allowed cases live here and nowhere else.
"""

from __future__ import annotations

import ast
import sys
from functools import cache

import pytest
from module_map import MODULES, PACKAGE, owner

# (a) Heavy or optional packages: slow to import (torch takes seconds on a loaded
# machine; numpy, matplotlib, the web stack a few hundred ms) or needed by few commands.
HEAVY = frozenset({"torch", "numpy", "matplotlib", "tokenizers", "safetensors", "gguf",
                   "transformers", "fastapi", "starlette", "uvicorn", "pydantic", "tqdm",
                   "playwright"})
# (c) (importer, imported) -> why a module-level import would be a circle.
CYCLES: dict[tuple[str, str], str] = {}


@cache
def _lazy_exports(package: str) -> dict[str, str]:
    """A package's names that load on first use (PEP 562: its `_LAZY` table, written as
    name -> module or module -> names), each with the module it comes from."""
    if package not in MODULES or MODULES[package].name != "__init__.py":
        return {}
    for node in ast.parse(MODULES[package].read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "_LAZY"):
            table = ast.literal_eval(node.value)
            return {name: module for key, value in table.items()
                    for name, module in ([(key, value)] if isinstance(value, str)
                                         else [(n, key) for n in value])}
    return {}


def _targets(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """What an import statement loads: depthlab modules by name (`from depthlab.x import
    y` is depthlab.x.y when that is a module, or the module a lazy name of depthlab.x
    loads), other packages by their top-level name."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return [owner(n) if n.split(".")[0] == "depthlab" else n.split(".")[0] for n in names]
    base = node.module or ""
    if node.level:
        package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
    if base.split(".")[0] != "depthlab":
        return [base.split(".")[0]]
    lazy = _lazy_exports(base)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else lazy.get(a.name, owner(base))
            for a in node.names]


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or (
        isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")


@cache
def _statements(name: str) -> tuple[list, list]:
    """(module-level imports, function-level imports) of a module, each (line, target)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    top, inner = [], []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.ImportFrom) and child.module == "__future__":
                    continue
                (inner if in_function else top).extend((child.lineno, t) for t in _targets(child, name))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                          ast.Lambda)))
    walk(tree, False)
    return top, inner


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@cache
def loads(name: str) -> frozenset[str]:
    """Every depthlab module and outside package importing `name` runs (its packages'
    __init__ first)."""
    seen: set[str] = set()
    todo = [name, *_parents(name)]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in MODULES:
            for _, target in _statements(m)[0]:
                todo.extend([target, *(_parents(target) if target in MODULES else [])])
    return frozenset(seen)


def heavy(name: str) -> frozenset[str]:
    return loads(name) & HEAVY


def verdict(importer: str, target: str) -> str | None:
    """Why a function-level import of `target` in `importer` breaks the rule, or None."""
    if (importer, target) in CYCLES:
        return None
    if target in MODULES:
        if heavy(target) - heavy(importer):
            return None
        return f"{target} loads nothing heavy that {importer} does not: import it at module level"
    if target in HEAVY:
        if target not in heavy(importer):
            return None
        return f"{importer} loads {target} already: import it at module level"
    if target in sys.stdlib_module_names:
        return f"{target} is the standard library: import it at module level"
    return f"{target} is not in HEAVY: import it at module level, or add it to HEAVY with why"


def violations() -> list[str]:
    return [f"{MODULES[name].relative_to(PACKAGE.parent)}:{line}: {why}"
            for name in MODULES for line, target in _statements(name)[1]
            if (why := verdict(name, target)) is not None]


def test_every_function_level_import_follows_the_rule():
    found = violations()
    assert found == [], f"{len(found)} imports break the rule:\n" + "\n".join(found)


def test_every_named_cycle_is_a_cycle():
    """A CYCLES entry whose import could move up (the imported module no longer reaches
    the importer at module level) is stale."""
    stale = [pair for pair in CYCLES if pair[0] not in loads(pair[1])]
    assert stale == []


@pytest.mark.parametrize(("importer", "target", "ok"), [
    ("depthlab.cli.train_cmd", "depthlab.train", True),  # (b): the trainer loads torch
    ("depthlab.cli.train_cmd", "depthlab.errors", False),  # cheap: module level
    ("depthlab.memory", "torch", True),  # (a): memory is torch-free
    ("depthlab.model.attention", "torch", False),  # loads torch already
    ("depthlab.errors", "json", False),  # the standard library
])
def test_the_rule_on_known_cases(importer, target, ok):
    assert (verdict(importer, target) is None) == ok


def test_a_lazy_name_counts_as_the_module_it_loads():
    """`from depthlab.probes import compare` runs depthlab.probes.simulator (PEP 562), which
    loads torch: allowed inside a function of a torch-free module, unlike compare_norms."""
    node = ast.parse("from depthlab.probes import compare, compare_norms").body[0]
    assert _targets(node, "depthlab.cli.probe_cmd") == ["depthlab.probes.simulator", "depthlab.probes"]
    assert verdict("depthlab.cli.probe_cmd", "depthlab.probes.simulator") is None
    assert verdict("depthlab.cli.probe_cmd", "depthlab.probes") is not None
