"""The package's modules by dotted name, read from the files: what tests/test_layers.py and
tests/test_imports.py walk."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "depthlab"


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = module_names()


def owner(name: str) -> str:
    """The nearest enclosing module of a dotted name (depthlab.x.y -> depthlab.x)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name
