"""``trivium log``: read a run's component logs, filtered, or follow them as they grow.

trivium log --config run.yaml -l warning          # warnings and errors of every component
trivium log --config run.yaml --component trainer -n 100
trivium log --run-dir checkpoints/proj/run -k timeout -f
"""

from __future__ import annotations

import argparse
import time

from trivium.cli.command import add_command

LEVEL_STYLES = {"DEBUG": "dim", "WARNING": "yellow", "ERROR": "bold red", "CRITICAL": "bold red"}


def register(subparsers: argparse._SubParsersAction) -> None:
    from trivium.monitor.run_lookup import add_run_location_arguments

    parser = add_command(subparsers, "log", show_logs)
    add_run_location_arguments(parser)
    parser.add_argument("-k", "--keyword", help="only records containing this text (case-insensitive)")
    parser.add_argument("-l", "--level", help="lowest level shown: debug, info, warning or error")
    parser.add_argument("-n", "--lines", type=int, default=50, help="show the last N records (default 50)")
    parser.add_argument(
        "--component", help="only this component's log, e.g. explorer, trainer, explorer_runner_0"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new records until Ctrl-C")
    parser.add_argument("--poll-seconds", type=float, default=0.5, help=argparse.SUPPRESS)


def show_logs(args: argparse.Namespace) -> int:
    """show or follow a run's component logs

    Show the records of <run_dir>/log/*.log (explorer, trainer, explorer_runner_N, ...)
    merged in time order, filtered by level, keyword and component."""
    import logging

    from rich.console import Console

    from trivium.errors import UserError
    from trivium.monitor.logs import LogFollower, filter_records, find_log_files, log_dir, parse_level
    from trivium.monitor.run_lookup import run_dir_from_args

    run_dir = run_dir_from_args(args)
    min_level = parse_level(args.level, key="--level") if args.level else logging.NOTSET
    if args.lines < 0:
        raise UserError(f"--lines must be 0 or more, got {args.lines}")
    console = Console(highlight=False, soft_wrap=True)
    if not find_log_files(run_dir, args.component) and not args.follow:
        what = f"component '{args.component}'" if args.component else "any component"
        known = sorted({path.stem for path in find_log_files(run_dir)})
        hint = f" Components with logs: {', '.join(known)}." if known else ""
        raise UserError(f"no log files for {what} under {log_dir(run_dir)}.{hint}")

    follower = LogFollower(run_dir, args.component, from_end=False)
    # The first poll reads the files from their start; later polls only what was appended.
    existing = follower.poll(min_level=min_level, keyword=args.keyword)
    existing.sort(key=lambda record: record.time.timestamp() if record.time else 0.0)
    for record in filter_records(existing, last=args.lines):
        _print_record(console, record)
    if not args.follow:
        return 0
    try:
        while True:
            time.sleep(args.poll_seconds)
            for record in follower.poll(min_level=min_level, keyword=args.keyword):
                _print_record(console, record)
    except KeyboardInterrupt:
        return 0


def _print_record(console, record) -> None:
    from rich.text import Text

    console.print(Text(record.text, style=LEVEL_STYLES.get(record.level or "", "")))
