"""The two change exercises of docs/architecture.md as tests: a residual added by its
recipe alone and a page section added by its recipe alone (tests/recipes.py) leave the
page, API, meta, simulator and static-export tests green. A test that lists variants,
sections, routes or their counts by hand fails here, so the next design added by its
recipe needs no test edited."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import recipes

ROOT = Path(__file__).resolve().parents[1]

# The suites that read the registries: the API and its schemas, /api/meta and the page's
# facts, the section registry and the static export, the simulator and its CLI, the
# config, the locales, and the page itself in Chromium (live and static).
OVER_THE_REGISTRIES = (
    "tests/test_web_api.py", "tests/test_web_errors.py", "tests/test_sections.py",
    "tests/test_page_facts.py", "tests/test_variants.py", "tests/test_residual.py",
    "tests/test_simulator_trail.py", "tests/test_simulator_frontier.py",
    "tests/test_simulator_wiring.py", "tests/test_cli_tables.py", "tests/test_probes_cli.py",
    "tests/test_locales.py", "tests/test_config.py", "tests/test_page_sections.py",
    "tests/test_page_browser.py", "tests/test_recipes.py",
)
REGISTERED = "tests/test_recipes.py::test_the_recipes_entries_are_registered"


@pytest.mark.skipif(not os.environ.get(recipes.ENV), reason=f"runs only under {recipes.ENV}=1")
def test_the_recipes_entries_are_registered(tmp_path):
    """Under DEPTHLAB_TEST_RECIPES the registries hold both, and every reader sees them."""
    from fastapi.testclient import TestClient

    from depthlab.config import RESIDUALS, ModelConfig, validate_model
    from depthlab.web import export
    from depthlab.web.app import create_app

    assert recipes.RESIDUAL in RESIDUALS
    assert validate_model(ModelConfig(residual=recipes.RESIDUAL)).write_scale == 0.5
    client = TestClient(create_app(tmp_path, warm=False))
    meta = client.get("/api/meta").json()
    assert recipes.RESIDUAL in meta["simulator"]["residuals"]
    assert recipes.SECTION in [s["name"] for s in meta["sections"]]
    client.headers[meta["token_header"]] = meta["write_token"]
    assert client.post(f"/api/{recipes.SECTION}", json={"k": 3}).json() == {"k": 3, "twice": 6}
    assert f"static/js/{recipes.SECTION}.js" in client.get("/").text
    sim = client.post("/api/simulate", json={"n": 4, "residual": recipes.RESIDUAL}).json()
    assert sim["request"]["residual"] == recipes.RESIDUAL
    html = export.export_page(tmp_path / "page", runs_dir=tmp_path / "runs", grid="small").read_text()
    blob = re.search(r'<script type="application/json" id="depthlab-data">(.*?)</script>', html, re.S)
    data = json.loads(blob.group(1).replace("<\\/", "</"))
    assert recipes.SECTION in data["sections"]
    assert any(f'"residual":"{recipes.RESIDUAL}"' in key for key in data["sections"]["simulate"])


@pytest.mark.slow
@pytest.mark.browser
def test_a_residual_and_a_section_added_by_their_recipes_leave_the_suite_green():
    env = {**os.environ, recipes.ENV: "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-x", "-m", "not slow",
         *OVER_THE_REGISTRIES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = "\n".join(done.stdout.splitlines()[-30:])
    assert done.returncode == 0, tail + done.stderr[-2000:]
    assert f"PASSED {REGISTERED}" in done.stdout, tail
