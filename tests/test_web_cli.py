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


def test_lab_refuses_a_busy_port_in_one_line_before_any_training(tmp_path):
    """A port another server listens on (found free at run time, then held): `lab` says so
    in one line naming the port and --port, at once, with no run started or written."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "depthlab", "lab", "--budget", "micro", "--no-real-model",
             "--port", str(port), "--runs", str(tmp_path / "runs")],
            capture_output=True, text=True, timeout=120, cwd=root,
            env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2
    assert done.stdout == ""  # nothing started: not even "no data ... running"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--port {port}" in lines[0] and "choose another with --port" in lines[0]
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_lab_sh_says_each_step_before_it_runs(tmp_path):
    """README's first command on a machine where pip and depthlab are stand-ins that only
    say they ran: the first line is the project's, every command it runs is announced on
    the line before it (pip is quiet for minutes), and torch's line names TORCH_SPEC."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    (tmp_path / "scripts").mkdir()
    for name in ("lab.sh", "setup.sh"):
        shutil.copy(root / "scripts" / name, tmp_path / "scripts" / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    stub = '#!/usr/bin/env bash\n[[ "$1" == -c ]] && { echo "depthlab 0 torch 0"; exit 0; }\necho "RAN {} $*"\n'
    for name in ("python", "depthlab"):
        (bin_dir / name).write_text(stub.replace("{}", name))
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "lab.sh"), "--port", "8123"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "TORCH_SPEC": "torch==9.9"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ran = [i for i, line in enumerate(lines) if line.startswith("RAN ")]
    assert lines[0].startswith("lab: ") and len(ran) >= 5
    for i in ran:  # announced by the line just before it
        assert lines[i - 1].startswith(("setup: ", "lab: ")), lines[i - 1:i + 1]
    torch_line = next(i for i in ran if "torch==9.9" in lines[i])
    assert "installing torch==9.9" in lines[torch_line - 1]
    assert lines[-1] == "RAN depthlab lab --port 8123" and "--port 8123" in lines[-2]
    assert any(line.startswith("setup: ") and "ready" in line for line in lines)
