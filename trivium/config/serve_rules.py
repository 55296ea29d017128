"""What a ``mode: serve`` config must hold; part of ``trivium.config.validate``'s rules.

Serve mode has no tasks: its experiences are outside applications' rewarded sessions, and
its weights move to the served engines every ``synchronizer.sync_interval`` trainer steps,
in turns (``explorer.min_running_model_num`` keep serving). Settings that need tasks, or
another process, or another sync policy are refused here, and so is an engine pool that
cannot keep its minimum serving; keys that only one side reads (the API's address outside
serve mode, training tasksets in it) are noted, and so are engines that pause for their loads.
"""

from __future__ import annotations

from trivium.algorithm.presets import PRESETS
from trivium.config.errors import Problem, Suggestion
from trivium.config.modes import MODE_TRAITS
from trivium.config.schema import ExplorerConfig, TriviumConfig
from trivium.config.storage_rules import check_trainer_reads_experiences


def check_serve_mode(config: TriviumConfig, problems: list[Problem]) -> None:
    traits = MODE_TRAITS.get(config.mode)
    if traits is None or not traits.serves_api:
        return
    mode = config.mode
    if config.cluster.uses_ray:
        problems.append(Problem(
            "cluster.placement",
            f"mode '{mode}' runs the engines, the trainer and the API in one process; set cluster.placement: process",
        ))
    check_trainer_reads_experiences(config.buffer.trainer_input.experience_buffer, mode, problems)
    preset = PRESETS.get(config.algorithm.algorithm_type)
    if preset is not None and not preset.learns_from_rollouts:
        problems.append(Problem(
            "algorithm.algorithm_type",
            f"'{config.algorithm.algorithm_type}' trains on a dataset; mode '{mode}' trains on served sessions, "
            "so pick a reinforcement learning algorithm (grpo, ppo, rloo, ...)",
        ))
    if preset is not None and preset.needs_greedy_baseline:
        problems.append(Problem(
            "algorithm.algorithm_type",
            f"'{config.algorithm.algorithm_type}' needs a greedy rollout of each task; mode '{mode}' has no tasks",
        ))
    synchronizer = config.synchronizer
    if synchronizer.sync_style in ("explorer_driven", "fully_async"):
        problems.append(Problem(
            "synchronizer.sync_style",
            f"mode '{mode}' loads new weights every sync_interval trainer steps; use fixed or trainer_driven",
        ))
    if synchronizer.sync_offset:
        problems.append(Problem(
            "synchronizer.sync_offset",
            f"mode '{mode}' has no explorer steps to run ahead of the trainer; set it to 0",
        ))
    check_engine_pool(config, problems)


def check_engine_pool(config: TriviumConfig, problems: list[Problem]) -> None:
    """The served engines: how many keep serving while the others load, and how often they are checked."""
    explorer = config.explorer
    engines = explorer.rollout_model.engine_num
    running = explorer.min_running_model_num
    if isinstance(engines, int) and not (isinstance(running, int) and 1 <= running <= engines):
        problems.append(Problem(
            "explorer.min_running_model_num",
            f"is {running!r}, but must be between 1 and explorer.rollout_model.engine_num ({engines}): it is how "
            "many of the served engines keep serving while the others load new weights; lower it or raise engine_num",
        ))
    interval = explorer.service_status_check_interval
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        problems.append(Problem(
            "explorer.service_status_check_interval",
            f"is {interval!r}; it is the seconds between the served engines' health checks, a whole number >= 1",
        ))


def serve_notes(config: TriviumConfig) -> list[Suggestion]:
    """Keys set where they have no effect: the API's address outside serve mode, tasksets in it."""
    traits = MODE_TRAITS.get(config.mode)
    if traits is None:
        return []
    if not traits.serves_api:
        defaults = ExplorerConfig()
        endpoints = any(model.enable_openai_api for model in [config.explorer.rollout_model, *config.explorer.auxiliary_models])
        readers = {"proxy_port": "mode: serve", "listen_address": "mode: serve and enable_openai_api",
                   "api_key_env": "mode: serve and enable_openai_api"}
        return [
            Suggestion(f"explorer.{key}", f"is read only by {readers[key]} (this run's mode is '{config.mode}')", "note")
            for key in readers
            if getattr(config.explorer, key) != getattr(defaults, key) and not (endpoints and key != "proxy_port")
        ]
    notes = []
    if config.buffer.explorer_input.tasksets:
        notes.append(Suggestion(
            "buffer.explorer_input.tasksets",
            f"mode '{config.mode}' trains on served sessions and reads no training taskset (eval tasksets are used)",
            "note",
        ))
    engines, running = config.explorer.rollout_model.engine_num, config.explorer.min_running_model_num
    if engines == running:
        notes.append(Suggestion(
            "explorer.min_running_model_num",
            f"equals explorer.rollout_model.engine_num ({engines}), so no engine leaves the rotation to load new "
            "weights: each pauses the requests it was given while it loads; with more engines than "
            "min_running_model_num the others serve meanwhile",
            "note",
        ))
    return notes
