"""Which runs of a grid can be reused: a run directory counts only when the config it
was trained with (its config hash) is the grid entry's.

Without this check a finished Shakespeare run would be served as the result of the
same experiment on another corpus. Each run's config.json records `config_sha256`
(depthlab.rundir.config_hash); the experiment folder records the hash of its whole
grid in experiment.json, so its export is rebuilt whenever the grid changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from depthlab.corpus import load_corpus
from depthlab.errors import UserError
from depthlab.experiments.spec import RunSpec
from depthlab.rundir import (
    CONFIG_FILE,
    atomic_write_text,
    config_changes,
    config_hash,
    describe_changes,
    read_config,
)

RECORD_FILE = "experiment.json"


@dataclass(frozen=True)
class Reuse:
    matches: bool  # the directory is empty or holds a run of exactly this config
    reason: str = ""  # why not, naming the differing fields


def check_run(run_dir: Path, spec: RunSpec, corpus_sha256: str | None = None) -> Reuse:
    """Whether a run directory already holds this spec's run: the same config and, where
    both are known, the same corpus text (the config names the corpus, not its content)."""
    if not (run_dir / CONFIG_FILE).exists():
        return Reuse(True)
    try:
        stored, record = read_config(run_dir)
    except UserError as e:
        return Reuse(False, str(e))
    if record.get("config_sha256", config_hash(stored)) != config_hash(spec.cfg):
        changes = config_changes(stored, spec.cfg)
        shown = describe_changes(changes) if changes else "its recorded config hash"
        return Reuse(False, f"{run_dir} was trained with another config: {shown}")
    corpus = record.get("corpus") if isinstance(record.get("corpus"), dict) else {}
    recorded = corpus.get("sha256")
    if corpus_sha256 is not None and isinstance(recorded, str) and recorded != corpus_sha256:
        return Reuse(False, f"{run_dir} was trained on another text of {corpus.get('spec')!r} "
                            f"(sha256 {recorded[:12]}..., now {corpus_sha256[:12]}...)")
    return Reuse(True)


def check_grid(specs: list[RunSpec], runs_root: Path, rerun: bool) -> set[str]:
    """The names of the runs to train again from scratch (only with rerun); without
    rerun, a run directory of another config is a UserError naming the fields."""
    stale = {}
    texts: dict[tuple[str, bool], str] = {}  # each corpus read once, for its sha256
    for spec in specs:
        key = (spec.cfg.data.corpus, spec.cfg.data.separate_documents)
        if key not in texts and (runs_root / spec.name / CONFIG_FILE).exists():
            texts[key] = load_corpus(*key).sha256
        reuse = check_run(runs_root / spec.name, spec, texts.get(key))
        if not reuse.matches:
            stale[spec.name] = reuse.reason
    if stale and not rerun:
        first = next(iter(stale.values()))
        more = f" (and {len(stale) - 1} more runs)" if len(stale) > 1 else ""
        raise UserError(f"{first}{more}; pass --rerun to train them again, or choose "
                        "another --out")
    return set(stale)


def grid_hash(specs: list[RunSpec]) -> str:
    joined = "\n".join(f"{s.name} {config_hash(s.cfg)} {s.init_only}" + (
        f" {s.trainer.__module__}.{s.trainer.__qualname__}" if s.trainer else "") for s in specs)
    return hashlib.sha256(joined.encode()).hexdigest()


def recorded_hash(root: Path) -> str | None:
    try:
        return json.loads((root / RECORD_FILE).read_text(encoding="utf-8")).get("config_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def write_record(root: Path, name: str, specs: list[RunSpec], **settings: object) -> None:
    record = {"experiment": name, "config_sha256": grid_hash(specs), **settings,
              "runs": {s.name: config_hash(s.cfg) for s in specs}}
    atomic_write_text(root / RECORD_FILE, json.dumps(record, indent=2, ensure_ascii=False))
