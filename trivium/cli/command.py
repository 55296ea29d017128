"""Adding one subcommand: its parser, and the function ``trivium`` calls with the parsed args.

What a command does is written once, in the docstring of the function it runs: the first
paragraph is the one-line help in the list of commands, the rest the description that
``trivium COMMAND --help`` shows.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable


def add_command(
    subparsers: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    summary, _, description = (inspect.getdoc(run) or "").partition("\n\n")
    parser = subparsers.add_parser(name, help=summary, description=description or None)
    parser.set_defaults(func=run)
    return parser
