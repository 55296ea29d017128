"""Validation of the workflow and reward-function names each taskset uses.

Owns: a workflow name must be registered (or be a dotted plugin path, checked where the run
starts); an unregistered reward name is a note, since reward functions are often the user's
own plugins; and a workflow or reward that needs an outside package or reads images says so
before the run starts.
Names are looked up in the registries, so plugins must be imported first (``--plugin-dir``).
"""

from __future__ import annotations

from typing import Any

from trivium.config.algorithm_rules import is_dotted_path
from trivium.config.errors import Problem, Suggestion
from trivium.config.schema import TriviumConfig

EXPLORING_MODES = ("both", "explore", "colocate", "bench")


def _tasksets(config: TriviumConfig):
    explorer_input = config.buffer.explorer_input
    for index, taskset in enumerate(explorer_input.tasksets):
        yield f"buffer.explorer_input.tasksets[{index}]", taskset
    for index, taskset in enumerate(explorer_input.eval_tasksets):
        yield f"buffer.explorer_input.eval_tasksets[{index}]", taskset


def check_workflows(config: TriviumConfig, problems: list[Problem]) -> None:
    """Each taskset's workflow and reward function exist and can start on this machine."""
    if config.mode not in EXPLORING_MODES:
        return
    from trivium.rewards.registry import REWARD_FNS
    from trivium.workflows.environments import missing_package_message
    from trivium.workflows.registry import WORKFLOWS

    reported: set[str] = set()  # one message per name, even when several tasksets use it
    for key, taskset in _tasksets(config):
        for field, registry in (("default_workflow_type", WORKFLOWS), ("default_reward_fn_type", REWARD_FNS)):
            name = getattr(taskset, field)
            if not name or is_dotted_path(name) or name in reported:
                continue
            if field == "default_reward_fn_type" and name not in registry:
                continue  # often a user's own function: a note (see workflow_notes), not an error
            found = _lookup(registry, name, f"{key}.{field}", problems)
            reason = None if found is None else missing_package_message(found) or getattr(found, "unsupported", None)
            if reason:
                problems.append(Problem(f"{key}.{field}", reason))
            if found is None or reason:
                reported.add(name)


def _lookup(registry: Any, name: str, key: str, problems: list[Problem]) -> Any:
    try:
        return registry.get(name)
    except KeyError as error:  # RegistryError: names the closest match and the known ones
        problems.append(Problem(key, f"{error} A plugin of your own needs --plugin-dir DIR (the folder of its .py file)."))
        return None


def workflow_notes(config: TriviumConfig) -> list[Suggestion]:
    """Dotted-path workflows and rewards are imported only where the run starts."""
    from trivium.rewards.registry import REWARD_FNS

    notes = []
    for key, taskset in _tasksets(config):
        reward = taskset.default_reward_fn_type
        if config.mode in EXPLORING_MODES and reward and not is_dotted_path(reward) and reward not in REWARD_FNS:
            notes.append(Suggestion(
                f"{key}.default_reward_fn_type",
                f"no reward function '{reward}' is registered here: load the plugin that defines it with "
                f"--plugin-dir, or the first task fails (built-in ones: {', '.join(REWARD_FNS.names())})",
                "note",
            ))
        for field in ("default_workflow_type", "default_reward_fn_type"):
            value = getattr(taskset, field)
            if value and is_dotted_path(value) and not _importable(value):
                notes.append(Suggestion(
                    f"{key}.{field}",
                    f"'{value}' cannot be imported here; it must be importable where the run executes "
                    "(e.g. with --plugin-dir)",
                    "note",
                ))
    return notes


def _importable(path: str) -> bool:
    from trivium.registry import import_object

    try:
        import_object(path)
    except Exception:  # noqa: BLE001 - any failure means "checked where it runs"
        return False
    return True
