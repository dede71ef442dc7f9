"""Errors a user can cause and fix.

Every mistake in a config, a flag or an input file raises a `UserError` whose
message names the field and what is allowed; the CLI prints it on one line and
exits with code 2, so nobody has to read a traceback to fix a typo.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input; the message is shown as it is.

    The page's server also gives some a locale `key` and its `params`
    (depthlab.web.messages), so the page can say them in its own language."""

    exit_code = 2

    def __init__(self, message: str = "", *, key: str | None = None,
                 params: dict[str, str | int | float] | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.params = params or {}


class ConfigError(UserError, ValueError):
    """An invalid config value or combination of values."""


def write_failed(e: OSError, kept: str = "every file written before it was kept whole") -> str:
    """One line for an OSError on write (disk full, read-only, /proc, a name too long):
    what failed and what is still there. depthlab writes to a temporary name and renames,
    so a failed write leaves the previous file, never half of one."""
    where = f"{e.filename}: " if e.filename else ""
    reason = e.strerror or str(e) or type(e).__name__
    return f"{where}cannot write ({reason}); nothing was left half-written, {kept}"


# Configs, tokenizers and run records are kilobytes to a few MB (a BPE tokenizer.json of
# 65,536 merges is ~4 MB); anything past this bound is not one of them.
MAX_JSON_BYTES = 64 << 20


def read_json_object(path: Path | str, missing: str = "no such file",
                     error: type[UserError] = UserError) -> dict:
    """Parse a file holding one JSON object, or raise `error` with one line naming the file:
    `missing` when it does not exist, the parser's complaint when it is not JSON."""
    if not str(path).strip():  # Path("") is ".", the working folder
        raise error(f"{missing}: the path is empty")
    path = Path(path)
    try:
        kind = path.stat().st_mode
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(kind):
        raise error(f"{path}: {'a folder' if stat.S_ISDIR(kind) else 'not a regular file'}, "
                    "not a JSON file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            raise error(f"{path}: larger than {MAX_JSON_BYTES >> 20} MiB; not a depthlab file")
        raw = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except (OSError, ValueError) as e:  # JSONDecodeError, UnicodeDecodeError, 5,000-digit ints
        raise error(f"{path}: not valid JSON ({e})") from None
    except RecursionError:  # json.loads recurses once per nesting level
        raise error(f"{path}: nested too deeply to be a depthlab file") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: expected a JSON object")
    return raw
