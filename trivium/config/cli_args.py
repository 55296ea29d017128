"""Command-line arguments and note printing shared by the subcommands that read a run config (run, plan)."""

from __future__ import annotations

import argparse
import sys

from trivium.config.errors import Suggestion


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="run configuration (YAML)")
    parser.add_argument(
        "--map", dest="mapping", metavar="MAPPING.json",
        help="read FILE as an upper-level tool's config and map its keys with this JSON mapping",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value",
        help="override config keys, e.g. algorithm.repeat_times=8 buffer.explorer_input.tasksets[0].path=/data",
    )


def add_plugin_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--plugin-dir DIR`` (repeatable); pass ``args.plugin_dir`` to ``prepare(plugin_dirs=...)``."""
    parser.add_argument(
        "--plugin-dir", action="append", default=[], metavar="DIR",
        help="import every .py file in DIR before checking the config, so the workflows, rewards, "
        "algorithm functions... it registers are known (repeatable)",
    )


def print_notes(notes: list[Suggestion], stage_name: str | None = None, stream=None) -> None:
    stream = stream or sys.stderr  # looked up per call, so redirected stderr is honoured
    where = f" (stage {stage_name})" if stage_name else ""
    for note in notes:
        print(f"{note.kind}{where}: {note.key}: {note.message}", file=stream)
