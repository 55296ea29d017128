"""The ``trivium`` command: one subcommand per module in this package.

Each subcommand module defines ``register(subparsers)``, which adds its parser with
``add_command`` (``command.py``): that sets ``func``, called with the parsed args, returning
an exit code, and reads the help from ``func``'s docstring. Modules are imported only
when listed here, so a heavy import never slows ``trivium --help`` for the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from trivium import __version__
from trivium.errors import ComponentDied, SyncTimeout, UserError
from trivium.runtime.openmp_defaults import apply_openmp_defaults

SUBCOMMAND_MODULES = (
    "run",
    "plan",
    "init",
    "view",
    "convert",
    "log",
    "debug",
    "report",
    "studio",
    "algorithms",
    "serve_tinker",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trivium",
        description="Reinforcement fine-tuning of language models and agents.",
        epilog="`trivium algorithms` lists every algorithm type (algorithm.algorithm_type) with its components.",
    )
    parser.add_argument("--version", action="version", version=f"trivium {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"trivium.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    apply_openmp_defaults()  # before anything imports torch: OpenMP reads them once
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    if getattr(args, "quiet_libraries", False):
        from trivium.runtime.quiet_output import quiet_third_party_output

        quiet_third_party_output(logging.INFO)
    try:
        return int(args.func(args) or 0)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except NotImplementedError as error:
        print(f"not implemented: {error}", file=sys.stderr)
        return 3
    except (ComponentDied, SyncTimeout) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
