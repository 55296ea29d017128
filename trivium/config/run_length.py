"""Refusing runs too short to train anything.

A run that trains is refused when the step counts ``resolve()`` derived leave its trainer no
step: tasksets whose rows × ``total_epochs`` cannot fill one explorer step, explorer steps
whose experiences cannot fill one training batch, a dataset smaller than one batch, or
``trainer.total_steps: 0``. Such a run would explore (or read) something and train nothing,
and in ``both`` its two sides would wait for each other. The rule is part of ``validate()``,
so ``trivium plan`` and ``trivium run`` refuse the same configs, with the numbers.
"""

from __future__ import annotations

import math

from trivium.config.errors import Problem
from trivium.config.modes import MODE_TRAITS
from trivium.config.schema import TriviumConfig
from trivium.config.taskset_size import count_rows


def check_run_length(config: TriviumConfig, problems: list[Problem]) -> None:
    traits = MODE_TRAITS.get(config.mode)
    if traits is None or not traits.trains:
        return
    buffer = config.buffer
    if buffer.batch_size < 1 or buffer.train_batch_size < 1 or buffer.total_epochs < 1:
        return  # the range rules report those
    if traits.reads_training_tasksets:
        problem = _tasksets_too_small(config) or _exploration_too_small(config)
    elif traits.trains_only:
        problem = _dataset_too_small(config)
    else:
        problem = None
    if problem is None and config.trainer.total_steps is not None and config.trainer.total_steps < 1:
        problem = Problem("trainer.total_steps", f"must be at least 1, got {config.trainer.total_steps}")
    if problem is not None:
        problems.append(problem)


def _tasksets_too_small(config: TriviumConfig) -> Problem | None:
    buffer = config.buffer
    if buffer.total_steps is not None:
        return None  # the tasksets are read over again until buffer.total_steps are done
    tasksets = buffer.explorer_input.tasksets
    rows = [count_rows(taskset) for taskset in tasksets]
    if not rows or any(count is None for count in rows) or sum(rows) == 0:
        return None  # an empty taskset is reported on its own, naming its file
    tasks = buffer.total_epochs * sum(rows)
    if tasks >= buffer.batch_size:
        return None
    named = ", ".join(f"'{taskset.name}' ({taskset.path})" for taskset in tasksets)
    held = f"taskset {named} has" if len(tasksets) == 1 else f"tasksets {named} have"
    return Problem(
        "buffer.batch_size",
        f"one explorer step takes {buffer.batch_size} tasks, but {held} {sum(rows)} row(s) × "
        f"buffer.total_epochs {buffer.total_epochs} = {tasks} task(s), not one whole step, so the trainer "
        f"would train nothing. Lower buffer.batch_size to at most {tasks}, raise buffer.total_epochs to "
        f"{math.ceil(buffer.batch_size / sum(rows))}, or set buffer.total_steps (the tasksets are then read "
        "over again)",
    )


def _exploration_too_small(config: TriviumConfig) -> Problem | None:
    from trivium.config.resolve import explorer_total_steps

    buffer, repeat_times = config.buffer, config.algorithm.repeat_times
    explorer_steps = explorer_total_steps(config)
    if not explorer_steps or config.trainer.total_steps != 0:
        return None
    supply = explorer_steps * buffer.batch_size * repeat_times
    if supply >= buffer.train_batch_size:
        return None
    return Problem(
        "buffer.train_batch_size",
        f"one training batch takes {buffer.train_batch_size} experiences, but the explorer makes {explorer_steps} "
        f"step(s) × buffer.batch_size {buffer.batch_size} × algorithm.repeat_times {repeat_times} = {supply}, so "
        f"the trainer would train 0 steps. Lower buffer.train_batch_size to at most {supply}, or explore more "
        "(buffer.total_steps, buffer.total_epochs)",
    )


def _dataset_too_small(config: TriviumConfig) -> Problem | None:
    buffer = config.buffer
    dataset = buffer.trainer_input.experience_buffer
    if buffer.total_steps is not None or config.trainer.total_steps != 0:
        return None
    rows = count_rows(dataset)
    if rows is None:
        return None
    return Problem(
        "buffer.train_batch_size",
        f"one training batch takes {buffer.train_batch_size} rows, but '{dataset.name}' ({dataset.path}) has "
        f"{rows} row(s) × buffer.total_epochs {buffer.total_epochs} = {rows * buffer.total_epochs}, so the trainer "
        f"would train 0 steps. Lower buffer.train_batch_size to at most {rows * buffer.total_epochs}, raise "
        "buffer.total_epochs, or set buffer.total_steps",
    )
