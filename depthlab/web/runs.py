"""Project measurements for the page: exported run data and one background run.

Reads `RUNS/NAME/export.json` and `RUNS/NAME/status.json` (written by the
experiments) and starts at most one experiment at a time as a subprocess
(`python -m depthlab experiment NAME --budget B --out RUNS`), so the page can
offer "run it now" with live progress without blocking the server.

A started run is recorded in `RUNS/.page-NAME.job.json` (its PID and the kernel's
start time of that PID), so the record outlives the server. A run can end without
writing its last status: the server stops it on shutdown (SIGTERM, which the run takes
as Ctrl-C and records when it can; SIGKILL after 5 s), or the server and the run are
both killed. So
whenever a recorded run is found gone while its status.json still says "running"
(at shutdown, at the next start-up, at a status request) the status is rewritten
as "interrupted". A run still alive after its server died (kill -9 of the server
alone) is shown as running, and no second run starts beside it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from depthlab.experiments import EXPERIMENTS
from depthlab.experiments.frontier_readings import complete
from depthlab.experiments.speedrun_readings import section as speedrun_section
from depthlab.rundir import DirLock, atomic_write_text
from depthlab.web.messages import RunError, refusal

__all__ = ["NAME_RE", "FRONTIER", "SPEEDRUN", "RunError", "Runs", "known_experiments"]

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


FRONTIER = "residual-frontier"  # the experiment whose frontier.json the page draws
SPEEDRUN = "speedrun"  # the experiment whose export.json the page's race section draws


def known_experiments() -> dict[str, dict[str, str]]:
    """name -> question {en, zh}, from the experiments registry."""
    return {name: {"en": e.question, "zh": e.question_zh} for name, e in EXPERIMENTS.items()}


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux: field 22 of /proc/PID/stat), or None
    where /proc is unavailable; told apart from a later process given the same PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    """Whether the process recorded as (pid, started) still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return not Path("/proc/self/stat").exists()  # no /proc: trust kill(pid, 0)
    return fields[0] != "Z" and (started is None or fields[19] == started)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _lacks(path: Path, e: Exception) -> str:
    """The answer's `error` for a data file the page cannot draw from."""
    return f"{path} lacks what the page draws ({type(e).__name__}: {e}); run the experiment again"


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
            raise refusal("err.unknown_experiment", 404, name=repr(name), names=", ".join(names))
        return name

    def export(self, name: str) -> dict:
        self.check_name(name)
        data = _read_json(self.root / name / "export.json")
        if data is None:
            raise refusal("err.no_data", 404, name=repr(name), experiment=name, root=str(self.root))
        return data

    def frontier(self) -> dict:
        """The residual-frontier experiment's frontier.json (beside its export.json), the
        data of the page's "beyond" section: {"has_data", "command", "frontier": the file
        or null}. A file written before the page's readings were shipped in it gets them now."""
        def read(data: dict) -> dict:
            if not isinstance(data.get("arms"), dict):
                raise TypeError("'arms' is not an object")
            return complete(data)
        return self._section(FRONTIER, "frontier.json", "frontier", read)

    def speedrun(self) -> dict:
        """The speedrun experiment's export.json as the page's race section draws it
        (depthlab.experiments.speedrun_readings: the leaderboard, curves, learned values
        and readings): {"has_data", "command", "race": that or null}."""
        return self._section(SPEEDRUN, "export.json", "race", speedrun_section)

    def _section(self, experiment: str, file: str, key: str, read: Callable[[dict], dict]) -> dict:
        """What a page section draws from one experiment's file: {"has_data", "command",
        key: read(the file) or null}. A missing file is an answer, not an error: the section
        says how to run the experiment; a file `read` cannot use is an answer with its reason."""
        path = self.root / experiment / file
        data = _read_json(path)
        out = {"has_data": False, key: None,
               "command": f"depthlab experiment {experiment} --budget quick --out {self.root}"}
        if data is None:
            if path.exists():
                out["error"] = f"{path} is not a readable JSON object; run the experiment again"
            return out
        try:
            out.update(has_data=True, **{key: read(data)})
        except (KeyError, TypeError, ValueError, IndexError, StopIteration, AttributeError) as e:
            out["error"] = _lacks(path, e)
        return out
        try:
            out.update(has_data=True, race=speedrun_section(data))
        except (KeyError, TypeError, ValueError, IndexError, StopIteration, AttributeError) as e:
            out["error"] = _lacks(path, e)
        return out

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

    # ---- the background job ------------------------------------------------------------
    def _record_path(self, name: str) -> Path:
        return self.root / f".page-{name}.job.json"

    def _records(self) -> dict[str, dict]:
        """name -> record of each run a server started and nobody has seen end yet."""
        out = {}
        for path in self.root.glob(".page-*.job.json") if self.root.is_dir() else ():
            record = _read_json(path)
            name = path.name[len(".page-"):-len(".job.json")]
            if record is not None and isinstance(record.get("pid"), int) and NAME_RE.match(name):
                out[name] = record
        return out

    def _settle(self, name: str, why: str) -> None:
        """The recorded run of `name` has ended: if its status.json still says running,
        make it say interrupted (it cannot say so itself any more); forget the record."""
        path = self.root / name / "status.json"
        status = _read_json(path)
        if DirLock.holder(path.parent) is not None:
            status = None  # another live process (a `depthlab experiment` run) owns it now
        if status is not None and status.get("state") in ("running", "exporting"):
            status.update(state="interrupted", updated_at=_now(),
                          message=f"interrupted: {why}; start it again to resume")
            atomic_write_text(path, json.dumps(status))
        self._record_path(name).unlink(missing_ok=True)

    def settle_all(self) -> None:
        """At start-up: settle the runs whose server died with them (kill -9, power loss)."""
        with self._lock:
            for name, record in self._records().items():
                if not _alive(record["pid"], record.get("pid_start")):
                    self._settle(name, "its process is gone")

    def _job_of(self, name: str) -> dict | None:
        """The page's job for `name` (held self._lock): this server's own, or one recorded
        by an earlier server that still runs. A job seen to have ended is settled."""
        if self._job and self._job["experiment"] == name and self._proc is not None:
            code = self._proc.poll()
            job = dict(self._job, running=code is None, returncode=code)
            if code is not None:
                if code != 0:
                    job["log_tail"] = self.log_tail(name)
                if self._record_path(name).exists():
                    self._settle(name, f"its process ended with exit code {code}")
            return job
        record = self._records().get(name)
        if record is None:
            return None
        if _alive(record["pid"], record.get("pid_start")):
            return dict(record, running=True, returncode=None, started_by="an earlier server")
        self._settle(name, "its process is gone")
        return None

    def status(self, name: str) -> dict:
        self.check_name(name)
        with self._lock:
            job = self._job_of(name)
        status = _read_json(self.root / name / "status.json")
        return {"experiment": name, "job": job, "status": status,
                "has_data": (self.root / name / "export.json").is_file()}

    def command(self, name: str, budget: str) -> list[str]:
        return [sys.executable, "-m", "depthlab", "experiment", name, "--budget", budget,
                "--out", str(self.root)]

    def start(self, name: str, budget: str) -> dict:
        self.check_name(name)
        runnable = known_experiments()
        if name not in runnable:  # a folder of someone's export: data to show, nothing to run
            raise refusal("err.not_runnable", 404, name=repr(name), names=", ".join(runnable))
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                raise refusal("err.busy", 409, name=repr(self._job["experiment"]))
            for other in self._records():
                job = self._job_of(other)
                if job is not None and job["running"]:
                    raise refusal("err.busy_earlier", 409, name=repr(other), pid=job["pid"])
            self.root.mkdir(parents=True, exist_ok=True)
            cmd = self.command(name, budget)
            log = open(self.root / f".page-{name}.log", "wb")  # noqa: SIM115 (owned by the child)
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
            log.close()
            self._job = {"experiment": name, "budget": budget, "command": " ".join(cmd[1:]),
                         "pid": self._proc.pid, "log": str(self.root / f".page-{name}.log")}
            record = dict(self._job, pid_start=_process_start(self._proc.pid),
                          server_pid=os.getpid(), started_at=_now())
            atomic_write_text(self._record_path(name), json.dumps(record))
            return dict(self._job, running=True, returncode=None)

    def log_tail(self, name: str, n_bytes: int = 2000) -> str:
        path = self.root / f".page-{name}.log"
        try:
            data = path.read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode("utf-8", "replace")

    def stop(self) -> None:
        """Stop the background run (server shutdown) and leave a status that says so."""
        with self._lock:
            if self._proc is None:
                return
            name = self._job["experiment"]
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
                self._settle(name, "the server that started it was stopped")
            elif self._record_path(name).exists():  # ended unseen: no status request since
                self._settle(name, f"its process ended with exit code {self._proc.returncode}")
