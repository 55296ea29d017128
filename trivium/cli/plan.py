"""``trivium plan``: print what a config will do — devices, and explorer supply vs trainer demand."""

from __future__ import annotations

import argparse

from trivium.cli.command import add_command
from trivium.config.cli_args import add_config_arguments, add_plugin_dir_argument, print_notes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "plan", run_plan)
    parser.add_argument(
        "--check-data", action="store_true",
        help="also read every taskset and dataset and list the rows a run would skip "
        "(exit status 1 when any row is bad or a dataset cannot be read)",
    )
    add_config_arguments(parser)
    add_plugin_dir_argument(parser)


def run_plan(args: argparse.Namespace) -> int:
    """show the resolved essentials of a config without running it

    Resolve and validate a config, then print the device split and the per-step and
    whole-run arithmetic of explorer supply vs trainer demand."""
    from trivium.config.plan import explain
    from trivium.config.prepare import prepare

    stages = prepare(args.config, args.overrides, mapping=args.mapping, plugin_dirs=args.plugin_dir)
    status = 0
    for index, stage in enumerate(stages):
        if index:
            print()
        if stage.config.stage_name:
            print(f"== stage {stage.config.stage_index + 1}/{len(stages)}: {stage.config.stage_name}")
        print(explain(stage.config).render())
        print_notes(stage.notes, stage.config.stage_name)
        if args.check_data and not report_data(stage.config):
            status = 1
    return status


def report_data(config) -> bool:
    """Print the data check of one stage; True when every dataset is clean."""
    from trivium.buffer.data_check import check_datasets

    checks = check_datasets(config)
    print("data check:" if checks else "data check: this stage reads no datasets")
    for check in checks:
        print(check.render())
    return all(check.ok for check in checks)
