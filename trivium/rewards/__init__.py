"""Reward functions: registry, the scoring rule, and the built-ins.

Built-ins: ``math_reward``, ``accuracy_reward``, ``format_reward``, ``countdown_reward``.
Add your own with ``@REWARD_FNS.register("name")`` in a plugin file, or name it by a
dotted path (``my_package.rewards:my_reward``).
"""

from trivium.rewards.registry import REWARD_FNS, RewardFn, resolve_reward_fn, score

__all__ = ["REWARD_FNS", "RewardFn", "resolve_reward_fn", "score"]
