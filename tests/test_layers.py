"""The package's import graph: no circle among depthlab modules, and no import pointing up
the data path (config -> model -> probes / trainer -> metric log -> experiments -> page).

Imports are read with `ast` from every module, including the ones inside functions (a
lazy import is still a dependency). `from depthlab.x import y` counts as an import of
depthlab.x.y when that is a module, else of depthlab.x.
"""

import ast

import pytest
from module_map import MODULES, owner

# The layer of each module, by longest matching name prefix. A module may import modules
# of its own layer or of a lower one, never of a higher one. The order is the data path;
# where the code's needs refine the path, the comment says why.
LAYERS = {
    # 0. Foundations: every other layer reads them; they read nothing above.
    "depthlab": 0,  # the package's __init__ alone: __version__ and the config classes
    "depthlab.errors": 0,
    "depthlab.locales": 0,
    "depthlab.atomic": 0,  # files written whole or not at all
    "depthlab.variants": 0,  # what each residual and norm is: the spec table the registries follow
    "depthlab.config": 0,
    "depthlab.memory": 0,  # parameter and memory counts from a config's shapes
    "depthlab.presets": 0,
    "depthlab.progress": 0,
    "depthlab.numtext": 0,
    "depthlab.sigfig": 0,  # numbers written as the page writes them (DL.fmt)
    "depthlab.threads": 0,  # how many threads a command that runs a model takes  # typed numbers read the same whatever the keyboard (full-width digits)
    # 1. The model. Its hook points are modules inside it, so depthlab.hooks (the hook API
    #    the model inherits) sits here rather than above the model.
    "depthlab.hooks": 1,
    "depthlab.model": 1,
    "depthlab.generate": 1,  # sampling from a model
    "depthlab.finite": 1,  # one-line refusals of weights or logits that are not finite
    # 2. Storage: the run directory and the files in it. The metric log's format
    #    (depthlab.metrics) is here, below the trainer that writes it; the data path's
    #    "metrics" stage, reading logs into results, is the experiments layer.
    "depthlab.rundir": 2,
    "depthlab.dcp": 2,  # a run's distributed (fsdp) checkpoints, read by load_model
    "depthlab.outdir": 2,  # where a command may write: checked, locked, replaced only if ours
    "depthlab.corpus": 2,
    "depthlab.tokenizer": 2,
    "depthlab.tokstream": 2,  # where a stream of text may be cut without changing its tokens
    "depthlab.bpe_corpus": 2,  # a corpus encoded fast, each distinct stretch once
    "depthlab.bpe_train": 2,  # BPE training in a child process: bounded in memory, stopped by a signal
    "depthlab.shards": 2,  # token shards on disk: the format, its checks, reading by offset
    "depthlab.shard_prepare": 2,  # a corpus streamed through a tokenizer into token shards
    "depthlab.metrics": 2,
    # 3. What reads a model and what makes one: probes, the trainer, Hugging Face I/O.
    "depthlab.probes": 3,
    "depthlab.train": 3,
    "depthlab.hf": 3,
    # 4. Experiments: grids of runs and what they show.
    "depthlab.experiments": 4,
    # 5. The two front ends.
    "depthlab.web": 5,
    "depthlab.cli": 5,
    "depthlab.__main__": 5,
}

# Known violations in code owned by other work in progress, to be emptied when it merges.
# A circle is covered by an entry when all its modules lie under the entry's names; each
# entry names its owner, and a stale entry (no circle left under it) fails the test too.
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}  # (module prefixes,) -> owner
KNOWN_UPWARD: dict[tuple[str, str], str] = {}  # (importer, imported) -> owner


def imports_of(name: str) -> set[str]:
    """The depthlab modules `name` imports, anywhere in its file."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {owner(a.name) for a in node.names if a.name.split(".")[0] == "depthlab"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.split(".")[0] != "depthlab":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else owner(base))
    found.discard(name)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_of(name: str) -> int:
    """The layer of the longest LAYERS name `name` lies under ("depthlab" itself: exactly)."""
    prefix = max((p for p in LAYERS if name == p or p != "depthlab" and _under(name, (p,))),
                 key=len)
    return LAYERS[prefix]


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_reader_sees_imports_inside_functions_and_relative_ones():
    assert "depthlab.probes.stream" in GRAPH["depthlab.train.evaluate"]  # top level
    assert "depthlab.tokenizer" in GRAPH["depthlab.rundir"]  # inside load_tokenizer
    assert "depthlab.model" in GRAPH["depthlab.rundir"]  # inside load_model
    assert {"depthlab.train.loop", "depthlab.train.setup"} <= GRAPH["depthlab.train"]
    assert layer_of("depthlab") == layer_of("depthlab.config") == 0
    assert layer_of("depthlab.rundir") < layer_of("depthlab.train.loop") < layer_of("depthlab.web.app")


def test_the_circle_finder_finds_a_circle_and_only_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset("abc")]


def test_no_import_circle_among_depthlab_modules():
    found = circles(GRAPH)
    covered = lambda c: any(all(_under(m, k) for m in c) for k in KNOWN_CIRCLES)
    assert [sorted(c) for c in found if not covered(c)] == [], "new import circle(s)"
    stale = [k for k in KNOWN_CIRCLES if not any(all(_under(m, k) for m in c) for c in found)]
    assert stale == [], "fixed: remove these from KNOWN_CIRCLES"


def test_every_module_has_a_layer():
    placed = tuple(p for p in LAYERS if p != "depthlab")
    assert [n for n in MODULES if n != "depthlab" and not _under(n, placed)] == []


def test_no_import_points_up_the_data_path():
    upward = {(a, b) for a, deps in GRAPH.items() for b in deps if layer_of(b) > layer_of(a)}
    assert upward - set(KNOWN_UPWARD) == set(), "imports pointing up the data path"
    assert set(KNOWN_UPWARD) - upward == set(), "fixed: remove these from KNOWN_UPWARD"


@pytest.mark.parametrize("name", ["depthlab.rundir", "depthlab.tokenizer"])
def test_the_storage_modules_no_longer_import_each_other_both_ways(name):
    other = {"depthlab.rundir": "depthlab.tokenizer", "depthlab.tokenizer": "depthlab.rundir"}
    assert not (other[name] in GRAPH[name] and name in GRAPH[other[name]])


def test_the_atomic_writes_depend_on_nothing_in_depthlab():
    assert GRAPH["depthlab.atomic"] <= {"depthlab.errors"}
