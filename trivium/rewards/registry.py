"""The reward-function registry and the one rule that turns a reward fn's output into a reward.

A reward function is called with keyword arguments only::

    fn(*, prompt: str, response: str, ground_truth: Any, **kwargs) -> float | dict[str, float]

``kwargs`` carries extra, function-specific settings (from ``workflow_args.reward_fn_args``)
and must be accepted even when unused. ``score`` applies the rule:

- a number is the reward; there are no components;
- a dict with a ``reward`` key: that value is the reward, the other keys are reported as
  metrics only (they do not add up to the reward);
- any other dict: every value is a component and the reward is their sum.

The reward then passes the rule every reward passes (``trivium.core.reward_check``): a
function that returns NaN or 1e308 raises ``ValueError`` naming itself and the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trivium.core.reward_check import RULE, reward_problem
from trivium.registry import Registry

RewardFn = Callable[..., "float | dict[str, float]"]

REWARD_FNS: Registry[RewardFn] = Registry(
    "reward function",
    builtin_modules=(
        "trivium.rewards.math_rewards",
        "trivium.rewards.countdown",
        "trivium.rewards.tool_calls",
        "trivium.rewards.outside",
        "trivium.rewards.reasoning_gym_reward",
    ),
)


def resolve_reward_fn(reward_fn: str | RewardFn) -> RewardFn:
    """A callable from a registered name, a dotted path, or a callable."""
    return reward_fn if callable(reward_fn) else REWARD_FNS.get(reward_fn)


def reads_response_length(fn: RewardFn) -> bool:
    """True if ``fn`` takes ``response_length``: the reply's length in tokens (math_dapo_reward)."""
    return bool(getattr(fn, "reads_response_length", False))


def score(
    fn: RewardFn, *, prompt: str, response: str, ground_truth: Any, **kwargs: Any
) -> tuple[float, dict[str, float]]:
    """Call ``fn`` and apply the rule above; returns ``(reward, components)``."""
    result = fn(prompt=prompt, response=response, ground_truth=ground_truth, **kwargs)
    name = getattr(fn, "__name__", repr(fn))
    if isinstance(result, dict):
        components = {str(key): _reward_number(value, f"{name}()['{key}']") for key, value in result.items()}
        if "reward" in components:
            reward = components.pop("reward")
        else:
            reward = sum(components.values())
        return _passes_the_rule(reward, f"{name}()"), components
    return _reward_number(result, f"{name}()"), {}


def _reward_number(value: Any, where: str) -> float:
    # Anything float() accepts without parsing text: int, bool, float, numpy and torch scalars.
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError(f"{where} returned {value!r}; a reward must be a number or a dict of numbers")
    try:
        number = float(value)
    except OverflowError:
        number = float("inf") if value > 0 else float("-inf")
    return _passes_the_rule(number, where)


def _passes_the_rule(reward: float, where: str) -> float:
    problem = reward_problem(reward)
    if problem:
        raise ValueError(f"{where} returned an unusable reward: {problem} ({RULE})")
    return reward
