"""``trivium run``: check the whole config (every stage) first, then launch the stages in order."""

from __future__ import annotations

import argparse
import contextlib
import os

from trivium.cli.command import add_command
from trivium.config.cli_args import add_config_arguments, add_plugin_dir_argument, print_notes
from trivium.errors import UserError
from trivium.runtime.startup_collector import collector_paused


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "run", run_command)
    add_config_arguments(parser)
    add_plugin_dir_argument(parser)


def run_command(args: argparse.Namespace) -> int:
    """run a reinforcement fine-tuning job from a config

    Load, resolve and validate the config (all stages), write config.resolved.yaml into
    the run directory, load plugins, then run each stage."""
    world = _launched_world()
    if world is not None and world.rank != 0:
        return _wait_as_trainer_rank(world, args.plugin_dir)
    with collector_paused():  # until the first stage's components are built (startup_collector.py)
        return _run_stages(args, world)


def _run_stages(args: argparse.Namespace, world) -> int:
    from trivium.config.prepare import prepare
    from trivium.config.run_dir import write_resolved
    from trivium.config.run_lock import run_lock
    from trivium.config.stages import use_previous_stage_weights

    stages = prepare(args.config, args.overrides, mapping=args.mapping, plugin_dirs=args.plugin_dir)
    with contextlib.ExitStack() as locks:
        if world is not None:
            locks.enter_context(_lead_trainer_ranks(world, [stage.config for stage in stages]))
        # One run per run directory: a second one started meanwhile is refused, naming this one.
        for stage in stages:
            locks.enter_context(run_lock(stage.config.checkpoint_job_dir))
        for stage in stages:
            print_notes(stage.notes, stage.config.stage_name)
            path = write_resolved(stage.config)
            print(f"{stage.config.stage_name or 'run'}: resolved config written to {path}")
        from trivium.runtime.local_ray import ray_started_for

        with ray_started_for(stages[0].config):
            from trivium.runtime.launcher import launch  # the heavy imports, once the config is known good

        for stage in stages:
            config = stage.config
            if config.previous_stage_job_dir:
                # The previous stage has finished: its final weights are known only now.
                config = use_previous_stage_weights(config)
                write_resolved(config)
            code = int(launch(config) or 0)
            if code != 0:
                return code
    if len(stages) > 1:
        from pathlib import Path

        from trivium.monitor.stage_gains import stage_gain_lines

        runs = [(stage.config.stage_name, Path(stage.config.checkpoint_job_dir)) for stage in stages]
        for line in stage_gain_lines(runs):
            print(line)
    return 0


# ---------------------------------------------------------------- started by torchrun (docs/fsdp.md)


def _launched_world():
    """This process's place among several that torchrun started; None when started alone."""
    if os.environ.get("WORLD_SIZE", "1") in ("", "1"):
        return None  # torch.distributed is not imported for the usual, single-process run
    from trivium.trainer.torchrun_ranks import LaunchedWorld

    return LaunchedWorld.from_environment()


def _wait_as_trainer_rank(world, plugin_dirs: list[str] | None) -> int:
    """Ranks 1..N-1 of a torchrun launch: serve rank 0's trainers, then exit."""
    from trivium.registry import load_plugin_dir
    from trivium.trainer.torchrun_ranks import open_store, serve_as_rank

    for directory in plugin_dirs or ():
        load_plugin_dir(directory)
    serve_as_rank(world, open_store(world))
    return 0


@contextlib.contextmanager
def _lead_trainer_ranks(world, configs: list):
    """Rank 0 of a torchrun launch: its trainers' other ranks are the launched processes."""
    from trivium.trainer.rank_group import ranks_started_by
    from trivium.trainer.torchrun_ranks import TorchrunRanks, open_store

    for config in configs:
        where = f"stage '{config.stage_name}': " if config.stage_name else ""
        if config.cluster.uses_ray:
            raise UserError(
                f"{where}cluster.placement: ray places the trainer's ranks as Ray actors; under torchrun they are "
                "its processes. Use placement: process, or start the run once, without torchrun"
            )
        ranks = int(config.trainer.data_parallel_size or 1)
        if ranks > world.world_size:
            raise UserError(
                f"{where}trainer.data_parallel_size is {ranks} but torchrun started {world.world_size} processes"
            )
    launcher = TorchrunRanks(world, open_store(world))
    try:
        with ranks_started_by(launcher):
            yield
    finally:
        launcher.release_all()
