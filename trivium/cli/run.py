"""``trivium run``: check the whole config (every stage) first, then launch the stages in order."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os

from trivium.config.cli_args import add_config_arguments, add_plugin_dir_argument, print_notes
from trivium.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a reinforcement fine-tuning job from a config",
        description="Load, resolve and validate the config (all stages), write config.resolved.yaml into "
        "the run directory, load plugins, then run each stage.",
    )
    add_config_arguments(parser)
    add_plugin_dir_argument(parser)
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    from trivium.config.prepare import prepare
    from trivium.config.run_dir import write_resolved
    from trivium.config.run_lock import run_lock
    from trivium.config.stages import use_previous_stage_weights

    refuse_outside_rank_launcher()
    stages = prepare(args.config, args.overrides, mapping=args.mapping, plugin_dirs=args.plugin_dir)
    with contextlib.ExitStack() as locks:
        # One run per run directory: a second one started meanwhile is refused, naming this one.
        for stage in stages:
            locks.enter_context(run_lock(stage.config.checkpoint_job_dir))
        for stage in stages:
            print_notes(stage.notes, stage.config.stage_name)
            path = write_resolved(stage.config)
            print(f"{stage.config.stage_name or 'run'}: resolved config written to {path}")
        launch = _launcher()
        for stage in stages:
            config = stage.config
            if config.previous_stage_job_dir:
                # The previous stage has finished: its final weights are known only now.
                config = use_previous_stage_weights(config)
                write_resolved(config)
            code = int(launch(config) or 0)
            if code != 0:
                return code
    return 0


def refuse_outside_rank_launcher() -> None:
    """One ``trivium run`` is the whole run: it starts its own trainer ranks. Started as one of
    several processes by torchrun (or any launcher that sets WORLD_SIZE), every copy would run
    the whole job; say what to do instead."""
    world_size = os.environ.get("WORLD_SIZE", "1")
    if world_size.isdigit() and int(world_size) > 1:
        raise UserError(
            f"trivium run was started as one of {world_size} processes (WORLD_SIZE={world_size}, "
            f"RANK={os.environ.get('RANK', '?')}: torchrun or a similar launcher). Start it once: it starts "
            f"its trainer ranks itself, with trainer.data_parallel_size: {world_size} on this machine, or as "
            "Ray actors across machines with cluster.placement: ray (docs/fsdp.md)"
        )


def _launcher():
    try:
        module = importlib.import_module("trivium.runtime.launcher")
    except ModuleNotFoundError as error:
        if error.name in ("trivium.runtime.launcher", "trivium.runtime"):
            raise UserError(
                "this installation has no runtime launcher (trivium.runtime.launcher); "
                "`trivium plan` checks a config without running it"
            ) from None
        raise
    return module.launch
