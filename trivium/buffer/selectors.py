"""Task selectors: which taskset row the explorer gets next.

Owns the ``TASK_SELECTORS`` registry. A selector maps global draw positions (0, 1, 2, ...
across epochs) to row indices; epoch = position // number of rows. ``sequential`` and
``shuffle`` visit every row once per epoch; ``random`` draws with replacement;
``difficulty`` prefers rows whose observed pass rate is closest to a target;
``difficulty_based`` (``difficulty_based.py``) predicts pass rates from two reference models'
pass rates and the feedback. The first three are pure functions of (seed, position), so a
resumed reader only needs its position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from trivium.errors import UserError
from trivium.registry import Registry

TASK_SELECTORS: Registry[type] = Registry("task selector", builtin_modules=("trivium.buffer.difficulty_based",))

DEFAULT_SEED = 42


class TaskSelector:
    # True: the selector is built with ``features``, the rows' ``feature_keys`` columns.
    uses_feature_keys: bool = False
    # True: the selector learns from each group's pass rate (``update``); a run connects it.
    learns_from_pass_rate: bool = False

    def __init__(self, num_tasks: int, seed: int | None = None):
        if num_tasks <= 0:
            raise UserError("The taskset has no usable rows; check its path, split and format keys.")
        self.num_tasks = num_tasks
        self.seed = DEFAULT_SEED if seed is None else int(seed)

    def select(self, position: int, count: int) -> list[int]:
        """Row indices of draws ``position .. position + count - 1``."""
        raise NotImplementedError(f"{type(self).__name__} must implement select(position, count)")

    def update(self, index: int, pass_rate: float) -> None:
        """Feedback from rollouts; only adaptive selectors use it."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@TASK_SELECTORS.register("sequential")
class SequentialSelector(TaskSelector):
    def select(self, position: int, count: int) -> list[int]:
        return [(position + i) % self.num_tasks for i in range(count)]


@TASK_SELECTORS.register("shuffle")
class ShuffleSelector(TaskSelector):
    """A new permutation every epoch, seeded by (seed, epoch)."""

    def __init__(self, num_tasks: int, seed: int | None = None):
        super().__init__(num_tasks, seed)
        self._epoch = -1
        self._order: np.ndarray | None = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._order = np.random.default_rng([self.seed, epoch]).permutation(self.num_tasks)
            self._epoch = epoch
        return self._order

    def select(self, position: int, count: int) -> list[int]:
        n = self.num_tasks
        return [int(self._permutation(p // n)[p % n]) for p in range(position, position + count)]


@TASK_SELECTORS.register("random")
class RandomSelector(TaskSelector):
    """Uniform draws with replacement; draw ``p`` is seeded by (seed, p)."""

    def select(self, position: int, count: int) -> list[int]:
        return [
            int(np.random.default_rng([self.seed, p]).integers(self.num_tasks))
            for p in range(position, position + count)
        ]


@TASK_SELECTORS.register("difficulty")
class DifficultySelector(TaskSelector):
    """Samples rows with weight exp(-|pass_rate - target| / temperature).

    Rows never rolled out count as exactly on target, so they are tried early. Within one
    call rows are drawn without replacement (while there are enough of them).
    """

    learns_from_pass_rate = True

    def __init__(self, num_tasks: int, seed: int | None = None, *, target: float = 0.5,
                 temperature: float = 0.1):
        super().__init__(num_tasks, seed)
        if not 0.0 <= target <= 1.0:
            raise UserError(f"task_selector.args.target must be in [0, 1], got {target}")
        if temperature <= 0:
            raise UserError(f"task_selector.args.temperature must be > 0, got {temperature}")
        self.target = target
        self.temperature = temperature
        self.pass_rates: dict[int, float] = {}
        self._rng = np.random.default_rng(self.seed)

    def weights(self) -> np.ndarray:
        distance = np.zeros(self.num_tasks)
        for index, rate in self.pass_rates.items():
            distance[index] = abs(rate - self.target)
        weights = np.exp(-distance / self.temperature)
        return weights / weights.sum()

    def select(self, position: int, count: int) -> list[int]:
        probabilities = self.weights()
        replace = count > self.num_tasks
        return [int(i) for i in self._rng.choice(self.num_tasks, size=count, replace=replace, p=probabilities)]

    def update(self, index: int, pass_rate: float) -> None:
        if not 0 <= index < self.num_tasks:
            raise IndexError(f"task index {index} is outside the taskset (0..{self.num_tasks - 1})")
        if math.isfinite(pass_rate):
            self.pass_rates[index] = float(pass_rate)

    def state_dict(self) -> dict[str, Any]:
        return {
            "pass_rates": {str(k): v for k, v in self.pass_rates.items()},
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pass_rates = {int(k): float(v) for k, v in state.get("pass_rates", {}).items()}
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]


def build_selector(
    selector_config: Any, num_tasks: int, default_seed: int | None = None, row_of: Callable[[int], dict] | None = None
) -> TaskSelector:
    """A selector from a ``task_selector`` config (``selector_type``, ``seed``, ``args``, ``feature_keys``).

    ``row_of(i)`` is the i-th usable row; selectors that read ``feature_keys`` need it.
    """
    name = getattr(selector_config, "selector_type", None) or "sequential"
    seed = getattr(selector_config, "seed", None)
    args = dict(getattr(selector_config, "args", None) or {})
    feature_keys = list(getattr(selector_config, "feature_keys", None) or [])
    try:
        cls = TASK_SELECTORS.get(name)
    except KeyError as error:
        raise UserError(f"task_selector.selector_type: {error}") from error
    if getattr(cls, "uses_feature_keys", False):
        if not feature_keys or row_of is None:
            raise UserError(f"task_selector.feature_keys: the '{name}' selector needs the columns it reads")
        args["features"] = feature_matrix(row_of, num_tasks, feature_keys)
    elif feature_keys:
        raise UserError(f"task_selector.feature_keys: the '{name}' selector reads no feature columns; remove them")
    try:
        return cls(num_tasks, default_seed if seed is None else seed, **args)
    except TypeError as error:
        raise UserError(f"task_selector.args for '{name}': {error}") from error


def feature_matrix(row_of: Callable[[int], dict], num_tasks: int, feature_keys: list[str]) -> np.ndarray:
    """(num_tasks, len(feature_keys)) floats from each usable row's ``feature_keys`` columns: the
    ``features`` a selector with the ``uses_feature_keys`` trait is built with."""
    matrix = np.empty((num_tasks, len(feature_keys)))
    for index in range(num_tasks):
        row = row_of(index)
        for column, key in enumerate(feature_keys):
            value = row.get(key)
            try:
                matrix[index, column] = float(value)
            except (TypeError, ValueError):
                raise UserError(
                    f"task_selector.feature_keys: usable row {index} has {key}={value!r}; every row needs a number "
                    f"in column '{key}'"
                ) from None
    return matrix
