"""`depthlab lab`, `serve` and `export-page` on the command line (no server started)."""

from __future__ import annotations

import json

from depthlab.cli import main
from tests.test_web_api import FIXTURE_EXPORT


def test_lab_no_serve_with_data_stops_after_the_data_step(tmp_path, capsys):
    (tmp_path / "residual").mkdir()
    (tmp_path / "residual" / "export.json").write_text(json.dumps(FIXTURE_EXPORT))
    assert main(["lab", "--no-serve", "--no-real-model", "--runs", str(tmp_path)]) == 0
    assert "data found" in capsys.readouterr().out


def test_serve_refuses_a_bad_port(capsys):
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


def test_export_page_small_grid(tmp_path, capsys):
    assert main(["export-page", str(tmp_path / "out"), "--grid", "small",
                 "--runs", str(tmp_path / "none")]) == 0
    html = (tmp_path / "out" / "index.html").read_text()
    assert 'id="depthlab-data"' in html and "uPlot" in html
    assert "default-src 'none'" in html  # the copy fetches nothing
    assert "index.html" in capsys.readouterr().out
