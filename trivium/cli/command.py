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
    subparsers: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], int],
    *,
    quiet_libraries: bool = False,
) -> argparse.ArgumentParser:
    """``quiet_libraries``: the command loads or saves models and datasets, and third-party
    progress bars and warnings are kept off its console (``trivium.runtime.quiet_output``).
    ``trivium run`` decides that itself, from the config's ``log.level``."""
    summary, _, description = (inspect.getdoc(run) or "").partition("\n\n")
    parser = subparsers.add_parser(name, help=summary, description=description or None)
    parser.set_defaults(func=run, quiet_libraries=quiet_libraries)
    return parser
