"""The one rule every reward passes, wherever it comes from.

A reward is a Python number (an int or a float, not a bool), finite, and no larger in
magnitude than ``MAX_ABS_REWARD``: beyond that it is taken as a bug in whatever computed it,
not a signal to learn from (a 1e308 reward overflows a group's advantages and the update).
Workflow experiences (``trivium.core.experience_check``), reward functions
(``trivium.rewards.registry.score``), judges' scores, experience operators and serve mode's
``/feedback`` all ask ``reward_problem``; none has a rule of its own.
"""

from __future__ import annotations

import math
from typing import Any

MAX_ABS_REWARD = 1e6
RULE = f"a reward must be a finite number within ±{MAX_ABS_REWARD:g}"


def reward_problem(reward: Any, *, max_abs_reward: float = MAX_ABS_REWARD) -> str | None:
    """Why ``reward`` cannot be learned from, or None when it passes."""
    if reward is None:
        return "no reward"
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return f"reward must be a Python int or float, got {_type_name(reward)}"
    try:
        value = float(reward)
    except OverflowError:  # an int too large for a float
        return f"reward of {len(str(abs(reward)))} digits is beyond ±{max_abs_reward:g}; check the reward function"
    if not math.isfinite(value):
        return f"reward is {value}"
    if abs(value) > max_abs_reward:
        return f"reward {value:g} is beyond ±{max_abs_reward:g}; check the reward function"
    return None


def is_valid_reward(reward: Any) -> bool:
    return reward_problem(reward) is None


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
