"""``trivium plan``: print what a config will do — devices, and explorer supply vs trainer demand."""

from __future__ import annotations

import argparse

from trivium.config.cli_args import add_config_arguments, add_plugin_dir_argument, print_notes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="show the resolved essentials of a config without running it",
        description="Resolve and validate a config, then print the device split and the per-step and "
        "whole-run arithmetic of explorer supply vs trainer demand.",
    )
    add_config_arguments(parser)
    add_plugin_dir_argument(parser)
    parser.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from trivium.config.plan import explain
    from trivium.config.prepare import prepare

    stages = prepare(args.config, args.overrides, mapping=args.mapping, plugin_dirs=args.plugin_dir)
    for index, stage in enumerate(stages):
        if index:
            print()
        if stage.config.stage_name:
            print(f"== stage {stage.config.stage_index + 1}/{len(stages)}: {stage.config.stage_name}")
        print(explain(stage.config).render())
        print_notes(stage.notes, stage.config.stage_name)
    return 0
