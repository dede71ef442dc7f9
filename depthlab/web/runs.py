"""Project measurements for the page: exported run data and one background run.

Reads `RUNS/NAME/export.json` and `RUNS/NAME/status.json` (written by the
experiments) and starts at most one experiment at a time as a subprocess
(`python -m depthlab experiment NAME --budget B --out RUNS`), so the page can
offer "run it now" with live progress without blocking the server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class RunError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def known_experiments() -> dict[str, dict[str, str]]:
    """name -> question {en, zh}, from the experiments registry."""
    from depthlab.experiments import EXPERIMENTS

    return {name: {"en": e.question, "zh": e.question_zh} for name, e in EXPERIMENTS.items()}


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Runs:
    """The runs directory as the page sees it, plus the one background job."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._job: dict | None = None

    def names(self) -> list[str]:
        names = list(known_experiments())
        if self.root.is_dir():
            names += sorted(p.parent.name for p in self.root.glob("*/export.json")
                            if NAME_RE.match(p.parent.name) and p.parent.name not in names)
        return names

    def check_name(self, name: str) -> str:
        names = self.names()
        if name not in names:
            raise RunError(404, f"name: unknown experiment {name!r}; choose one of: {', '.join(names)}")
        return name

    def export(self, name: str) -> dict:
        self.check_name(name)
        data = _read_json(self.root / name / "export.json")
        if data is None:
            raise RunError(404, f"name: no data for {name!r} yet; run "
                           f"`depthlab experiment {name} --budget quick --out {self.root}`")
        return data

    def summary(self) -> list[dict]:
        questions = known_experiments()
        out = []
        for name in self.names():
            data = _read_json(self.root / name / "export.json")
            out.append({"name": name, "question": questions.get(name) or (data or {}).get("question"),
                        "has_data": data is not None,
                        "exported_at": (data or {}).get("exported_at"),
                        "budget": (data or {}).get("budget"),
                        "command": f"depthlab experiment {name} --budget quick --out {self.root}"})
        return out

    def status(self, name: str) -> dict:
        self.check_name(name)
        with self._lock:
            job = dict(self._job) if self._job and self._job["experiment"] == name else None
            if job is not None and self._proc is not None:
                code = self._proc.poll()
                job["running"] = code is None
                job["returncode"] = code
                if code not in (None, 0):
                    job["log_tail"] = self.log_tail(name)
        status = _read_json(self.root / name / "status.json")
        return {"experiment": name, "job": job, "status": status,
                "has_data": (self.root / name / "export.json").is_file()}

    def start(self, name: str, budget: str) -> dict:
        self.check_name(name)
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                raise RunError(409, f"experiment {self._job['experiment']!r} is already running; "
                               "one at a time")
            self.root.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "depthlab", "experiment", name, "--budget", budget,
                   "--out", str(self.root)]
            log = open(self.root / f".page-{name}.log", "wb")  # noqa: SIM115 (owned by the child)
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
            log.close()
            self._job = {"experiment": name, "budget": budget, "command": " ".join(cmd[1:]),
                         "pid": self._proc.pid, "log": str(self.root / f".page-{name}.log")}
            return dict(self._job, running=True, returncode=None)

    def log_tail(self, name: str, n_bytes: int = 2000) -> str:
        path = self.root / f".page-{name}.log"
        try:
            data = path.read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode("utf-8", "replace")

    def stop(self) -> None:
        """Stop the background run (server shutdown)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
