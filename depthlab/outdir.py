"""Where a command may write, decided before it writes anything.

Every command that writes a run directory (train, experiments, hf import, import-gguf,
export, lab's SmolLM2 import) goes through here, in this order:
1. `check_location`: --out is a name (not empty, no part longer than the file system
   allows), nothing on its way is a file, its nearest existing folder is writable;
2. `survey`: what the directory holds: nothing, a directory depthlab wrote as one run
   (or one exported checkpoint), recognised by the marker DIR/.depthlab written when it
   was created (runs from before the marker: a depthlab config.json beside only the
   files a trainer writes), or anything else, named;
3. `check_target`: --force/--overwrite replace only a directory of the kind the command
   writes, never the command's own source, never a folder of runs or foreign files.
   What depthlab owns is decided by exact name (`inventory`), never by a pattern: the
   files of its kind (OWN_NAMES), the two files of each checkpoints/step_NNNNNNN/, and the
   temporary names its own writes make (`.NAME.xxxxxxxx.tmp` for a NAME it owns, a
   checkpoint's `checkpoints/.tmp-xxxxxxxx/` holding only checkpoint files); anything else,
   a note inside a checkpoint folder included, makes the command refuse, naming it;
4. `Claim`: create the directory, take its lock (depthlab.rundir.DirLock) and check again
   under it; on the way out the lock file, and any folder it created that stayed empty,
   are removed, so a refused command leaves the disk as it found it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from depthlab import __version__
from depthlab.atomic import DIR_MODE, atomic_write_text
from depthlab.errors import UserError, write_failed
from depthlab.memory import human
from depthlab.rundir import (
    CONFIG_FILE,
    MARKER_FILE,
    METRICS_FILE,
    STATE_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    DirLock,
    is_checkpoint_file,
    run_contents,
)

RUN = "run"
HF_CHECKPOINT = "hf-checkpoint"
TOKEN_SHARDS = "token-shards"
EMPTY = "empty"
NOUNS = {RUN: "run directory", HF_CHECKPOINT: "exported checkpoint",
         TOKEN_SHARDS: "token shard folder"}
LABELS = {kind: ("an " if noun[0] in "aeiou" else "a ") + noun for kind, noun in NOUNS.items()}
CHECKPOINTS_DIR = "checkpoints"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SHARD_MANIFEST = "manifest.json"  # written last by `depthlab data prepare` (depthlab.shards)
# What each kind holds when depthlab writes it, besides its lock, its marker and the
# leftovers of a killed write: anything else is someone else's.
OWN_NAMES = {
    RUN: frozenset({CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE,
                    METRICS_FILE, CHECKPOINTS_DIR}),
    HF_CHECKPOINT: frozenset({CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE}),
    TOKEN_SHARDS: frozenset({SHARD_MANIFEST, TOKENIZER_FILE}),
}
# Names a kind owns by their form: the numbered shards of `depthlab data prepare`.
OWN_FORMS = {TOKEN_SHARDS: re.compile(r"[A-Za-z0-9_.=-]+_\d{5}\.bin")}
# in each checkpoints/step_NNNNNNN/: these two, or a DCP folder's (rundir.is_checkpoint_file)
CHECKPOINT_FILES = frozenset({WEIGHTS_FILE, STATE_FILE})
_STEP = re.compile(r"step_\d+")
# The random part tempfile.mkstemp/mkdtemp put in a name (tempfile._RandomNameSequence):
# atomic_write's `.NAME.xxxxxxxx.tmp`, save_checkpoint's `checkpoints/.tmp-xxxxxxxx`.
_RANDOM = "[a-z0-9_]{8}"
_TEMP_FILE = re.compile(rf"\.(.+)\.{_RANDOM}\.tmp")
_CHECKPOINT_STAGE = re.compile(rf"\.tmp-{_RANDOM}")


def short(text: str, keep: int = 240) -> str:
    """A path or name cut (in the middle) when too long for one line of an error message."""
    return text if len(text) <= keep else f"{text[:keep // 2 - 2]}...{text[-(keep // 2 - 1):]}"


def _limit(name: str, default: int, near: str) -> int:
    try:
        return os.pathconf(near, name)
    except (OSError, ValueError):
        return default


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long to look up, among others
        return False


def _anchor(path: Path) -> Path:
    """The nearest existing folder at or above `path`."""
    return next(p for p in (path, *path.parents, Path(".")) if _is_dir(p))


def check_location(value: str | os.PathLike, flag: str = "--out") -> Path:
    """--out as a Path, or one line saying why nothing could be written there. Reads only."""
    text = os.fspath(value)
    if not text.strip():
        raise UserError(f"{flag}: empty; give the name of a directory")
    if "\0" in text:
        raise UserError(f"{flag}: contains a NUL character")
    path, shown = Path(text), short(text)
    name_max = _limit("PC_NAME_MAX", 255, str(_anchor(Path(os.path.abspath(text)))))
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise UserError(f"{flag} {shown}: the name {short(part, 30)} is "
                            f"{len(os.fsencode(part))} bytes long; at most {name_max} are allowed")
    path_max = _limit("PC_PATH_MAX", 4096, "/")
    if len(os.fsencode(os.path.abspath(text))) >= path_max:
        raise UserError(f"{flag} {shown}: the full path is longer than {path_max - 1} bytes")
    for p in (path, *path.parents):
        if p.is_dir():
            break
        if os.path.lexists(p):
            raise UserError(f"{flag} {shown}: " + ("exists and is not a directory" if p == path
                                                   else f"{short(str(p))} is not a directory"))
    anchor = _anchor(path)
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {shown}: {short(str(anchor))} is not writable")
    return settled(path)


def settled(path: str | os.PathLike) -> Path:
    """`path`, with any `..` resolved to the folder it names now: `link/checkpoints/..`
    names the run only while checkpoints/ exists, so a command that empties the run would
    lose its own folder (and its lock file) half way. Paths without `..` are kept as
    given, so messages show what the user typed."""
    path = Path(path)
    return Path(os.path.realpath(path)) if ".." in path.parts else path


def check_space(path: Path, need_bytes: int, flag: str = "--out") -> None:
    """Refuse before writing when the disk holding `path` has less free space than the
    estimate (the new files are complete before an old directory is removed)."""
    free = shutil.disk_usage(_anchor(Path(path))).free
    if need_bytes > free:
        raise UserError(f"{flag} {short(str(path))}: needs about {human(need_bytes)}, "
                        f"the disk has {human(free)} free; nothing was written")


def check_apart(out: Path, source: Path, flag: str = "--out") -> None:
    """The output may be neither the command's source, nor inside it, nor hold it."""
    o, s = Path(out).resolve(), Path(source).resolve()
    if o == s:
        raise UserError(f"{flag} {short(str(out))}: is the source of this command; "
                        f"choose another {flag}")
    if o in s.parents:
        raise UserError(f"{flag} {short(str(out))}: holds the source {short(str(source))}; "
                        f"choose another {flag}")
    if s in o.parents:
        raise UserError(f"{flag} {short(str(out))}: lies inside the source "
                        f"{short(str(source))}; choose another {flag}")


def check_not_inside(out: Path, source: str | os.PathLike, source_flag: str,
                     flag: str = "--out") -> None:
    """A file the command reads (its --corpus) may not lie inside --out, which the command
    may empty, however either path is spelled (`..`, symlinks: resolved paths compare)."""
    o, s = Path(out).resolve(), Path(source).expanduser().resolve()
    if o == s or o in s.parents:
        raise UserError(f"{source_flag} {short(str(source))}: lies inside {flag} "
                        f"{short(str(out))}, which this command may empty; move it out or "
                        f"choose another {flag} (nothing was changed)")


@dataclass(frozen=True)
class Contents:
    """What a directory holds: kind RUN or HF_CHECKPOINT (depthlab wrote it and nothing
    else is in it), EMPTY (missing, or only a lock and marker), or None (anything else)."""

    kind: str | None
    about: str  # in words, for a one-line message


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(short(n, 40) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _marker_kind(path: Path) -> str | None:
    try:
        kind = json.loads((path / MARKER_FILE).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if kind in OWN_NAMES else None


def _old_run(path: Path) -> bool:
    """A run written before the marker existed: config.json is a depthlab run record."""
    try:
        with open(path / CONFIG_FILE, "rb") as f:
            record = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return False
    cfg = record.get("config") if isinstance(record, dict) else None
    return isinstance(cfg, dict) and all(isinstance(cfg.get(k), dict)
                                         for k in ("model", "data", "train"))


def _lkind(p: Path) -> str:
    """"file", "dir" or "other" (a symlink, a pipe, ...), without following a link: a run's
    own entries are never links, so a link under an own name is someone else's."""
    try:
        mode = os.lstat(p).st_mode
    except OSError:
        return "other"
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def _own_temp(p: Path, owned: frozenset[str], kind: str | None = None) -> bool:
    """A file atomic_write left while writing one of `owned` (`.NAME.xxxxxxxx.tmp`), or
    one of the names `kind` owns by their form."""
    m = _TEMP_FILE.fullmatch(p.name)
    return m is not None and _lkind(p) == "file" and (
        m.group(1) in owned or _own_form(kind, m.group(1)))


def _own_form(kind: str | None, name: str) -> bool:
    form = OWN_FORMS.get(kind) if kind is not None else None
    return form is not None and form.fullmatch(name) is not None


@dataclass
class Inventory:
    """A directory sorted into what depthlab wrote there, by exact name, and the rest."""

    files: list[Path]  # every file depthlab wrote (leftovers of killed writes included)
    dirs: list[Path]  # its folders, innermost first
    leftovers: list[Path]  # what killed writes left: temporary files, checkpoint stages
    foreign: list[str]  # everything else, relative to the directory


def _checkpoint_folder(folder: Path, inv: Inventory, rel: str, temps: bool) -> bool:
    """Sort one checkpoints/ folder's files into `inv`; a stage (`temps`) may also hold the
    temporary files of a killed write. Whether it held nothing else."""
    clean = True
    for q in sorted(folder.iterdir()):
        if is_checkpoint_file(q.name) and _lkind(q) == "file" or temps and _own_temp(
                q, CHECKPOINT_FILES):
            inv.files.append(q)
        else:
            inv.foreign.append(f"{rel}/{q.name}")
            clean = False
    inv.dirs.append(folder)
    return clean


def inventory(path: Path, kind: str) -> Inventory:
    """What depthlab wrote in `path` as a `kind` directory and what it did not (its lock and
    marker left out: they are the command's own)."""
    owned = OWN_NAMES[kind]
    inv = Inventory([], [], [], [])
    for name in run_contents(path):
        p = Path(path) / name
        if name == CHECKPOINTS_DIR and name in owned and _lkind(p) == "dir":
            for c in sorted(p.iterdir()):
                rel = f"{CHECKPOINTS_DIR}/{c.name}"
                stage = _CHECKPOINT_STAGE.fullmatch(c.name) is not None
                if _lkind(c) == "dir" and (stage or _STEP.fullmatch(c.name)):
                    if _checkpoint_folder(c, inv, rel, temps=stage) and stage:
                        inv.leftovers.append(c)
                else:
                    inv.foreign.append(rel)
            inv.dirs.append(p)
        elif (name in owned or _own_form(kind, name)) and _lkind(p) == "file":
            inv.files.append(p)
        elif _own_temp(p, owned, kind):
            inv.files.append(p)
            inv.leftovers.append(p)
        else:
            inv.foreign.append(name)
    return inv


def survey(path: Path) -> Contents:
    """What `path` holds, without changing it."""
    path = Path(path)
    names = run_contents(path)
    if not names:
        return Contents(EMPTY, "is empty" if path.is_dir() else "does not exist")
    kind = _marker_kind(path) or (RUN if _old_run(path) else None)
    foreign = inventory(path, kind).foreign if kind is not None else names
    if kind is not None and not foreign:
        return Contents(kind, f"holds {LABELS[kind]} depthlab wrote ({_listing(names)})")
    runs = [n for n in names if (path / n / CONFIG_FILE).is_file()
            or (path / n / MARKER_FILE).is_file()]
    if runs:
        return Contents(None, f"holds other runs ({_listing(runs)}); it is a folder of runs, "
                        "not one")
    if kind is not None:
        return Contents(None, f"holds {LABELS[kind]} depthlab wrote but also "
                        f"{_listing(foreign)}, which depthlab did not write")
    return Contents(None, f"holds {_listing(names)}, which depthlab did not write as a run")


def check_target(path: str | os.PathLike, kind: str, *, replace: bool,
                 replace_flag: str = "--force", sources: tuple[Path, ...] = (),
                 flag: str = "--out") -> Contents:
    """Refuse, with one line and nothing changed, unless `path` may receive a new `kind`
    directory: it is missing or empty, or `replace` is given and it holds a `kind`
    directory depthlab wrote and nothing else; and it is apart from every source."""
    path = check_location(path, flag)
    for source in sources:
        check_apart(path, source, flag)
    found = survey(path)
    if found.kind == EMPTY or (found.kind == kind and replace):
        return found
    where = f"{flag} {short(str(path))}: {found.about}"
    if found.kind == kind:
        raise UserError(f"{where}; add {replace_flag} to replace it, or choose another {flag}")
    if replace:
        raise UserError(f"{where}; {replace_flag} replaces only {LABELS[kind]} depthlab "
                        f"wrote, so nothing was changed")
    raise UserError(f"{where}; choose another {flag} (nothing was changed)")


def write_marker(path: Path, kind: str) -> None:
    """DIR/.depthlab: this directory was written by depthlab as one `kind`."""
    atomic_write_text(Path(path) / MARKER_FILE,
                      json.dumps({"kind": kind, "depthlab_version": __version__}))


def clear_run(path: Path, replace_flag: str = "--overwrite") -> None:
    """Empty a run directory depthlab wrote (its lock and marker stay), removing exactly the
    files `inventory` names as its own; anything else is refused before a file goes. The
    caller holds the lock."""
    found = survey(path)
    if found.kind not in (RUN, EMPTY):
        raise UserError(f"{short(str(path))}: {found.about}; {replace_flag} replaces only a "
                        "run directory depthlab wrote, so nothing was changed")
    if found.kind == EMPTY:
        return
    inv = inventory(path, RUN)
    for f in inv.files:
        f.unlink(missing_ok=True)
    for d in inv.dirs:
        d.rmdir()  # empty now; something written there meanwhile stops the command here


def remove_leftovers(path: Path) -> list[Path]:
    """Delete what a killed atomic write left in a run depthlab wrote: exactly the
    temporary names of its own files and checkpoint stages (`inventory`). Only the lock
    holder of a directory `survey` calls a run may call it."""
    inv = inventory(path, RUN)
    for p in inv.leftovers:
        if _lkind(p) == "dir":
            for q in p.iterdir():
                q.unlink()  # only checkpoint files and their temporaries: inventory said so
            p.rmdir()
        else:
            p.unlink(missing_ok=True)
    return inv.leftovers


def _make_dirs(path: Path, flag: str) -> list[Path]:
    """Create `path` and its missing parents; the folders created, outermost first."""
    missing = [p for p in (path, *path.parents) if not p.is_dir()][::-1]
    created: list[Path] = []
    for p in missing:
        try:
            p.mkdir()
        except FileExistsError:
            continue  # another process made it meanwhile
        except OSError as e:
            _remove_empty(created)
            raise UserError(f"{flag} {short(str(path))}: cannot create {short(str(p))} "
                            f"({e.strerror})") from None
        created.append(p)
    return created


def _remove_empty(created: list[Path]) -> None:
    for p in reversed(created):
        try:
            p.rmdir()
        except OSError:
            return  # something was written there: it stays


class Claim:
    """The lock of a directory a command writes, taken after `check_location`. Releasing
    removes the lock file, a marker with nothing beside it, and the folders it created
    that stayed empty."""

    def __init__(self, path: Path, what: str = "run directory", flag: str = "--out") -> None:
        self.path, self.what, self.flag = Path(path), what, flag
        self._lock: DirLock | None = None
        self._created: list[Path] = []
        self._had_marker = True

    def acquire(self) -> Claim:
        check_location(self.path, self.flag)
        self._created = _make_dirs(self.path, self.flag)
        self._had_marker = (self.path / MARKER_FILE).exists()
        try:
            self._lock = DirLock(self.path, self.what).acquire()
        except BaseException:
            self._tidy()
            raise
        return self

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
            self._tidy()

    def _tidy(self) -> None:
        if not self._had_marker and not run_contents(self.path):
            (self.path / MARKER_FILE).unlink(missing_ok=True)
        _remove_empty(self._created)

    def __enter__(self) -> Claim:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextmanager
def claim_target(path: Path, kind: str, *, replace: bool, replace_flag: str = "--force",
                 sources: tuple[Path, ...] = (), flag: str = "--out") -> Iterator[Contents]:
    """check_target, then the lock, then check_target again under it (another process may
    have written there in between): the caller writes inside the `with`."""
    path = settled(path)
    check_target(path, kind, replace=replace, replace_flag=replace_flag, sources=sources,
                 flag=flag)
    with Claim(Path(path), NOUNS[kind], flag):
        yield check_target(path, kind, replace=replace, replace_flag=replace_flag,
                           sources=sources, flag=flag)


@contextmanager
def writable_dir(value: str | os.PathLike, flag: str = "--out") -> Iterator[Path]:
    """A folder that is not a run (export-page's): checked, created and shown to take a
    file before the work starts, so a bad location fails at once, not after the work;
    the folders created are removed again when nothing was written there."""
    path = check_location(value, flag)
    created = _make_dirs(path, flag)
    try:
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe-", suffix=".tmp", dir=path)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise UserError(f"{flag} {short(str(path))}: cannot write there ({e.strerror})") from None
        yield path
    finally:
        _remove_empty(created)


def stage_dir(out_dir: Path) -> Path:
    """A fresh hidden folder beside out_dir in which a whole directory is written before
    `publish` puts it in place."""
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name[:80]}.", suffix=".tmp",
                                  dir=out_dir.parent))
    stage.chmod(DIR_MODE)  # mkdtemp makes it private; a run directory is not
    return stage


def publish(stage: Path, out_dir: Path) -> None:
    """Swap the finished `stage` in for out_dir, whose lock the caller holds: readers see
    the old directory or the new one, never half of one; the old one goes last."""
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name[:80]}.old-", suffix=".tmp",
                                dir=out_dir.parent))
    os.replace(out_dir, old)  # onto the empty folder just made
    try:
        os.replace(stage, out_dir)
    except OSError as e:
        try:
            os.replace(old, out_dir)
        except OSError:
            raise UserError(f"{out_dir}: another process created it while it was being "
                            f"replaced; its previous contents are kept in {old}") from None
        raise UserError(f"{out_dir}: cannot put the new directory in place ({e.strerror}); "
                        "nothing was changed") from None
    shutil.rmtree(old, ignore_errors=True)


def write_whole(out_dir: Path, kind: str, write: Callable[[Path], None],
                need_bytes: int = 0) -> None:
    """Write a whole `kind` directory with write(stage) and put it in place of out_dir
    (the caller holds its lock): the disk space is checked first, a failure leaves
    out_dir as it was."""
    check_space(out_dir, need_bytes)
    target = Path(os.path.realpath(out_dir))  # through a symlink: the folder it names
    try:
        stage = stage_dir(target)
    except OSError as e:
        raise UserError(write_failed(e, f"{out_dir} is as it was")) from None
    try:
        write_marker(stage, kind)
        write(stage)
        publish(stage, target)
    except OSError as e:  # a full disk, whoever raised it (depthlab.atomic.write_error)
        shutil.rmtree(stage, ignore_errors=True)
        name = Path(e.filename).name if e.filename else None
        shown = OSError(e.errno, e.strerror, str(Path(out_dir) / name)) if name else e
        raise UserError(write_failed(shown, f"{out_dir} is as it was")) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
