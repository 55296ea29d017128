"""``trivium report``: redraw a run's plots and write its self-contained ``report.html``.

trivium report --config run.yaml
trivium report --run-dir checkpoints/proj/run
"""

from __future__ import annotations

import argparse

from trivium.cli.command import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    from trivium.monitor.run_lookup import add_run_location_arguments

    parser = add_command(subparsers, "report", make_report)
    add_run_location_arguments(parser)
    parser.add_argument("--no-summary", action="store_true", help="do not print the summary panel")


def make_report(args: argparse.Namespace) -> int:
    """plot a run's metrics and write report.html

    Read <run_dir>/metrics.jsonl, write PNG plots to <run_dir>/plots/ and a
    self-contained <run_dir>/report.html (summary, plots, resolved config)."""
    from rich.console import Console

    from trivium.monitor.plots import plots_dir
    from trivium.monitor.report import write_report
    from trivium.monitor.run_lookup import run_dir_from_args
    from trivium.monitor.summary import print_summary

    run_dir = run_dir_from_args(args)
    console = Console(highlight=False)
    report_path = write_report(run_dir)
    if not args.no_summary:
        print_summary(run_dir, console)
    plots = sorted(plots_dir(run_dir).glob("*.png"))
    console.print(f"plots: {len(plots)} in {plots_dir(run_dir)}", soft_wrap=True)
    console.print(f"report: {report_path}", soft_wrap=True)
    return 0
