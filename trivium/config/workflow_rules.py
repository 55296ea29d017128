"""Validation of the workflow and reward-function names each taskset uses, walking the
tasksets with ``keyed_tasksets`` (each with its key; the other taskset rules walk them so too).

Owns: a workflow name must be registered, or be a dotted path that imports here (the
explorer builds workflows in this process or in Ray actors with the same environment, so a
missing module is an error naming it); an unregistered reward name, or a dotted reward path
that does not import here, is a note, since reward functions are often the user's own
plugins; and a workflow or reward that needs an outside package or reads images says so
before the run starts.
Names are looked up in the registries, so plugins must be imported first (``--plugin-dir``).
"""

from __future__ import annotations

from typing import Any

from trivium.config.algorithm_rules import is_dotted_path
from trivium.config.errors import Problem, Suggestion
from trivium.config.modes import EXPLORING_MODES
from trivium.config.schema import TriviumConfig


def keyed_tasksets(config: TriviumConfig):
    """Every training and evaluation taskset, each with its key (``buffer.explorer_input.tasksets[0]``)."""
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
    from trivium.workflows.registry import WORKFLOWS

    reported: set[str] = set()  # one message per name, even when several tasksets use it
    for key, taskset in keyed_tasksets(config):
        workflow_key = f"{key}.default_workflow_type"
        workflow = _check_name(WORKFLOWS, taskset.default_workflow_type, workflow_key, problems, reported)
        reward = taskset.default_reward_fn_type
        if not reward and workflow is not None:
            # The workflow's own default reward, when the taskset names none.
            reward = getattr(workflow, "default_reward_fn", None)
        if reward and not is_dotted_path(reward) and reward in REWARD_FNS:
            _check_name(REWARD_FNS, reward, f"{key}.default_reward_fn_type", problems, reported)
        # Unregistered reward names are often a user's own function: a note (see workflow_notes).


def _check_name(registry: Any, name: str | None, key: str, problems: list[Problem], reported: set[str]) -> Any:
    """The registered object for ``name``; a problem when it is unknown or cannot start here."""
    from trivium.registry import missing_package_message

    if not name or name in reported:
        return None
    found = _lookup(registry, name, key, problems)
    reason = None if found is None else missing_package_message(found) or getattr(found, "unsupported", None)
    if reason:
        problems.append(Problem(key, reason))
    if found is None or reason:
        reported.add(name)
    return found


def _lookup(registry: Any, name: str, key: str, problems: list[Problem]) -> Any:
    try:
        return registry.get(name)
    except KeyError as error:  # RegistryError: names the closest match and the known ones
        if is_dotted_path(name):
            message = (
                f"{error}. This is user code that is not present here: put the folder that holds it on "
                "PYTHONPATH, install the package that provides it, or load its file with --plugin-dir DIR."
            )
        else:
            message = f"{error} A plugin of your own needs --plugin-dir DIR (the folder of its .py file)."
        problems.append(Problem(key, message))
        return None


def workflow_notes(config: TriviumConfig) -> list[Suggestion]:
    """Unregistered reward names, and dotted reward paths that do not import here."""
    from trivium.rewards.registry import REWARD_FNS

    notes = []
    for key, taskset in keyed_tasksets(config):
        reward = taskset.default_reward_fn_type
        if config.mode in EXPLORING_MODES and reward and not is_dotted_path(reward) and reward not in REWARD_FNS:
            notes.append(Suggestion(
                f"{key}.default_reward_fn_type",
                f"no reward function '{reward}' is registered here: load the plugin that defines it with "
                f"--plugin-dir, or the first task fails (built-in ones: {', '.join(REWARD_FNS.names())})",
                "note",
            ))
        if reward and is_dotted_path(reward) and not _importable(reward):
            notes.append(Suggestion(
                f"{key}.default_reward_fn_type",
                f"'{reward}' cannot be imported here; it must be importable where the run executes "
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
