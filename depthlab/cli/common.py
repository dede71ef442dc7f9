"""Shared CLI pieces: one-line errors, config flags (--preset/--config/--set), JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from depthlab.errors import UserError


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (and a pointer to --help) instead of the usage dump."""

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


def add_config_args(parser: argparse.ArgumentParser, default_preset: str = "course") -> None:
    from depthlab.presets import describe_presets

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


def config_from_args(args: argparse.Namespace):  # -> Config (import kept lazy)
    from depthlab.config import Config, apply_overrides
    from depthlab.presets import get_preset

    if args.config and args.preset:
        raise UserError("give either --preset or --config, not both")
    cfg = Config.load(args.config) if args.config else get_preset(args.preset or args.default_preset)
    return apply_overrides(cfg, args.overrides)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
