"""A residual and a page section that exist only in tests, each added by its recipe in
docs/architecture.md and nothing else: the residual is its spec, its registry entry and
its two page labels; the section is its request model, its compute, its `Section` entry
and its JS module. Their names start with `_test_`, which no real design will take.

`DEPTHLAB_TEST_RECIPES=1 pytest ...` registers both before any test module is imported
(tests/conftest.py), so the suite runs over a registry that holds them; tests/test_recipes.py
runs the page, API, meta, simulator and static-export tests that way and requires them
green: a test that lists variants, sections or routes by hand fails there.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

RESIDUAL = "_test_half"  # x <- x + F(x) / 2
SECTION = "_test_recipe"  # an exact function of its request, with a box on the page
ENV = "DEPTHLAB_TEST_RECIPES"

SECTION_JS = """(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  DL.figures._test_recipe = function (source, showError) {
    const box = DL.h("section", { id: "_test_recipe" });
    document.querySelector("main").append(box);
    return {
      update() {
        source.section("_test_recipe", { k: 2 }).then((r) => { box.textContent = String(r.twice); }).catch(showError);
      },
      relabel() {},
    };
  };
})();
"""


def spec_table():
    """depthlab.variants loaded alone, before the package: an entry added to it now is
    read by the config and everything after as if it stood in variants.py."""
    import importlib.util
    import sys

    if "depthlab.variants" in sys.modules:
        if "depthlab.config" in sys.modules:
            raise RuntimeError("register the recipes before anything imports depthlab")
        return sys.modules["depthlab.variants"]
    path = Path(__file__).resolve().parents[1] / "depthlab" / "variants.py"
    spec = importlib.util.spec_from_file_location("depthlab.variants", path)
    variants = importlib.util.module_from_spec(spec)
    sys.modules["depthlab.variants"] = variants
    spec.loader.exec_module(variants)
    return variants


def add_residual() -> None:
    """The residual x <- x + F(x) / 2 by its recipe: spec, registry entry, page labels.
    The spec goes in first, so the config's key list (read at import) holds it."""
    variants = spec_table()

    variants.RESIDUAL_SPECS[RESIDUAL] = variants.ResidualSpec(
        RESIDUAL, "x ← x + F(x) / 2", "nothing to initialise", write_scale=lambda writes: 0.5)
    from depthlab.model import residual

    residual.RESIDUAL_BUILDERS[RESIDUAL] = lambda cfg: residual.ScaledResidual(cfg.write_scale)
    from depthlab.locales import LANGS, table

    for lang in LANGS:
        table(lang)[f"sim.res.{RESIDUAL}"] = {"en": "half writes", "zh": "半写入"}[lang]


def add_section() -> Path:
    """The section `_test_recipe` by its recipe: request model, compute, `Section` entry and
    its JS module, the module beside a copy of the page's static files (returned)."""
    from pydantic import Field

    from depthlab.web import app, export, sections
    from depthlab.web.schemas import Request

    class RecipeEchoRequest(Request):
        k: int = Field(1, ge=1, le=9, description="how many")

    def echo(req: RecipeEchoRequest) -> dict:
        return {"k": req.k, "twice": 2 * req.k}

    static = Path(tempfile.mkdtemp(prefix="depthlab-recipes-")) / "static"
    shutil.copytree(sections.STATIC, static)
    (static / "js" / f"{SECTION}.js").write_text(SECTION_JS, encoding="utf-8")
    for module in (sections, export):
        module.STATIC = static
    app.STATIC_DIR = static
    sections.SECTIONS.append(sections.Section(
        SECTION, "POST", f"/api/{SECTION}", RecipeEchoRequest, echo, "test", "A section of the tests only",
        lru=8, static=lambda grid: [RecipeEchoRequest(k=1), RecipeEchoRequest(k=2)], script=f"js/{SECTION}.js"))
    return static


def register() -> None:
    """Both, in the order their recipes need."""
    add_residual()
    add_section()
