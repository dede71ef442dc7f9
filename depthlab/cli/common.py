"""Shared CLI pieces: one-line errors, config flags (--preset/--config/--set), JSON output."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, NoReturn

from depthlab.atomic import write_error
from depthlab.config import Config, apply_overrides
from depthlab.errors import UserError, write_failed
from depthlab.presets import describe_presets, get_preset

NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (and a pointer to --help) instead of the usage dump,
    and negative numbers in every float form read as values: argparse takes -2 and -.5
    for numbers but -1e3 for an unknown flag (`probe norms -1e3 2`, `--scale -1e-3`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run_handler(args: argparse.Namespace) -> int:
    try:
        return int(args.handler(args) or 0)
    except UserError as e:
        print(f"depthlab: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("depthlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `depthlab ... | head`
        sys.stderr.close()
        return 0
    except OSError as e:  # disk full, a read-only folder, /proc: the input was the place
        print(f"depthlab: error: {write_failed(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # a write that failed inside torch or safetensors, outside
        failed = write_error(e, getattr(e, "filename", None) or "a file")  # atomic_write
        if failed is None:
            raise
        print(f"depthlab: error: {write_failed(failed)}", file=sys.stderr)
        return 2


def parse_ids(text: str, flag: str) -> list[int]:
    """"1,2, 3" -> [1, 2, 3]; an empty item, a sign or anything but digits is refused."""
    items = [s.strip() for s in text.split(",")]
    if not all(s.isascii() and s.isdigit() for s in items):
        bad = next(s for s in items if not (s.isascii() and s.isdigit()))
        raise UserError(f"{flag} must be token ids (whole numbers >= 0) separated by single "
                        f"commas, e.g. 1,2,3; {bad!r} in {text!r} is not one")
    return [int(s) for s in items]


def add_config_args(parser: argparse.ArgumentParser, default_preset: str = "course") -> None:
    names = ", ".join(n for n, _ in describe_presets())
    group = parser.add_argument_group("model config")
    group.add_argument("--preset", default=None,
                       help=f"named starting config ({names}); default: {default_preset}")
    group.add_argument("--config", metavar="CONFIG.json", default=None,
                       help="start from a config file (a run's config.json works too)")
    group.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY=VALUE",
                       help="override one field, repeatable: --set model.n_layers=12 "
                       "--set model.residual=none")
    parser.set_defaults(default_preset=default_preset)


def config_from_args(args: argparse.Namespace) -> Config:

    if args.config is not None and args.preset is not None:
        raise UserError("give either --preset or --config, not both")
    # an empty name is refused by name, never read as "the default"
    cfg = (Config.load(args.config) if args.config is not None
           else get_preset(args.default_preset if args.preset is None else args.preset))
    return apply_overrides(cfg, args.overrides)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
