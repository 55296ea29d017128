"""Registered operators of the experience and task pipelines.

Owns the built-in operators. An experience operator is built from its ``args`` and has
``process(experiences) -> (experiences, metrics)``; a task operator has
``keep(row) -> bool``. Grouping follows ``group_id`` (the samples of one task).
Data-Juicer's operators, named by their own names, are built in ``data_juicer_ops.py``.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from trivium.core.experience import Experience
from trivium.core.reward_check import is_valid_reward, reward_problem
from trivium.errors import UserError
from trivium.registry import Registry

Metrics = dict[str, float]

# The data_juicer operator (a Data-Juicer recipe file) lives in data_juicer_ops.py.
EXPERIENCE_OPERATORS: Registry[type] = Registry(
    "experience operator", builtin_modules=("trivium.buffer.data_juicer_recipes",)
)
TASK_OPERATORS: Registry[type] = Registry("task operator")


def _groups(experiences: list[Experience]) -> dict[str, list[Experience]]:
    groups: dict[str, list[Experience]] = defaultdict(list)
    for experience in experiences:
        groups[experience.group_id or experience.eid].append(experience)
    return groups


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class ExperienceOperator:
    name = "experience_operator"

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], Metrics]:
        raise NotImplementedError(f"{type(self).__name__} must implement process(experiences)")


@EXPERIENCE_OPERATORS.register("invalid_reward_filter")
class InvalidRewardFilter(ExperienceOperator):
    """Drops experiences whose reward fails the rule every reward passes (None, NaN, infinite, beyond ±1e6)."""

    name = "invalid_reward_filter"

    def process(self, experiences):
        kept = [e for e in experiences if is_valid_reward(e.reward)]
        return kept, {"dropped": float(len(experiences) - len(kept))}


@EXPERIENCE_OPERATORS.register("reward_filter")
class RewardFilter(ExperienceOperator):
    """Keeps min_reward <= reward <= max_reward, and reward >= threshold when given."""

    name = "reward_filter"

    def __init__(self, min_reward: float | None = None, max_reward: float | None = None,
                 threshold: float | None = None):
        if min_reward is None and max_reward is None and threshold is None:
            raise UserError("reward_filter needs at least one of min_reward, max_reward, threshold")
        if min_reward is not None and max_reward is not None and min_reward > max_reward:
            raise UserError(f"reward_filter: min_reward {min_reward} is above max_reward {max_reward}")
        self.low = max(v for v in (min_reward, threshold, -math.inf) if v is not None)
        self.high = math.inf if max_reward is None else max_reward

    def process(self, experiences):
        kept = [e for e in experiences if is_valid_reward(e.reward) and self.low <= e.reward <= self.high]
        return kept, {"dropped": float(len(experiences) - len(kept))}


@EXPERIENCE_OPERATORS.register("reward_std_filter")
class RewardStdFilter(ExperienceOperator):
    """Drops whole groups whose reward std (population) is <= min_std: they teach nothing
    to group-relative advantages."""

    name = "reward_std_filter"

    def __init__(self, min_std: float = 0.0):
        self.min_std = min_std

    def process(self, experiences):
        kept, dropped_groups = [], 0
        for group in _groups(experiences).values():
            rewards = [float(e.reward) if is_valid_reward(e.reward) else 0.0 for e in group]
            if statistics.pstdev(rewards) > self.min_std + 1e-12:
                kept.extend(group)
            else:
                dropped_groups += 1
        return kept, {"dropped": float(len(experiences) - len(kept)), "dropped_groups": float(dropped_groups)}


@EXPERIENCE_OPERATORS.register("dapo_dynamic_sampling")
class DapoDynamicSampling(ExperienceOperator):
    """DAPO's dynamic sampling by outcome: keeps a group only when some but not all of its samples
    are correct (``metrics[metric_key]`` above ``correct_threshold``; the reward where the metric
    is missing), so a shaped reward (the overlong penalty) cannot keep an all-correct group.
    Groups of one sample leave too. The algorithm type ``dapo`` filters by the reward instead
    (grpo's ``std_threshold``); this operator is the outcome-based form."""

    name = "dapo_dynamic_sampling"

    def __init__(self, metric_key: str = "accuracy", correct_threshold: float = 0.0):
        self.metric_key, self.correct_threshold = metric_key, correct_threshold

    def _correct(self, experience: Experience) -> bool:
        score = experience.metrics.get(self.metric_key, experience.reward)
        return is_valid_reward(score) and float(score) > self.correct_threshold

    def process(self, experiences):
        kept, all_correct, all_wrong = [], 0, 0
        for group in _groups(experiences).values():
            correct = sum(self._correct(e) for e in group)
            if len(group) < 2:
                continue
            if correct == 0:
                all_wrong += len(group)
            elif correct == len(group):
                all_correct += len(group)
            else:
                kept.extend(group)
        return kept, {"dropped": float(len(experiences) - len(kept)), "dropped_all_correct": float(all_correct),
                      "dropped_all_wrong": float(all_wrong)}


@EXPERIENCE_OPERATORS.register("mask_response_truncated")
class MaskResponseTruncated(ExperienceOperator):
    """Trains on no token of a response cut at the length limit (``info['finish_reason']`` is
    ``length``): its action mask becomes all False; it still counts as a row."""

    name = "mask_response_truncated"

    def process(self, experiences):
        masked = 0
        for experience in experiences:
            if experience.info.get("finish_reason") == "length":
                import torch  # here: reading the operator registry must not load torch

                experience.action_mask = torch.zeros(experience.response_length, dtype=torch.bool)
                masked += 1
        return experiences, {"masked_truncated": float(masked)}


_SHAPING_OPS: dict[str, Callable[[float, float], float]] = {
    "ADD": lambda reward, term: reward + term,
    "SUB": lambda reward, term: reward - term,
    "MUL": lambda reward, term: reward * term,
    "DIV": lambda reward, term: reward / term,
}


@EXPERIENCE_OPERATORS.register("reward_shaping_mapper")
class RewardShapingMapper(ExperienceOperator):
    """reward <- reward OP (weight * stat), for each {stats_key, op_type, weight} in order.

    The stat is read from ``exp.info`` first, then ``exp.metrics``. An experience without
    the stat (or dividing by zero) keeps its reward and is counted in the metrics.
    """

    name = "reward_shaping_mapper"

    def __init__(self, reward_shaping_configs: list[dict[str, Any]]):
        self.rules = []
        for rule in reward_shaping_configs or []:
            op = str(rule.get("op_type", "ADD")).upper()
            if op not in _SHAPING_OPS or "stats_key" not in rule:
                raise UserError(
                    f"reward_shaping_mapper rule {rule}: needs stats_key and op_type in {sorted(_SHAPING_OPS)}"
                )
            self.rules.append((rule["stats_key"], op, float(rule.get("weight", 1.0))))

    def process(self, experiences):
        missing = 0
        for experience in experiences:
            reward = float(experience.reward) if is_valid_reward(experience.reward) else 0.0
            for key, op, weight in self.rules:
                stat = experience.info.get(key, experience.metrics.get(key))
                if not _is_finite_number(stat) or (op == "DIV" and weight * stat == 0):
                    missing += 1
                    continue
                reward = _SHAPING_OPS[op](reward, weight * float(stat))
            experience.reward = reward
        # A shaped reward passes the same rule as any other; one that fails it is not trained on.
        kept = [e for e in experiences if reward_problem(e.reward) is None]
        return kept, {"missing_stats": float(missing), "refused_rewards": float(len(experiences) - len(kept))}


@EXPERIENCE_OPERATORS.register("pass_rate_calculator")
class PassRateCalculator(ExperienceOperator):
    """Per group: the share of samples with reward >= success_threshold.

    Written to ``exp.metrics['pass_rate']`` and ``exp.info['pass_rate']``; each listener
    (e.g. ``TaskReader.update_pass_rate`` for the difficulty selector) is called once per
    group with (task_id, pass_rate).
    """

    name = "pass_rate_calculator"

    def __init__(self, success_threshold: float = 1.0):
        self.success_threshold = success_threshold
        self.listeners: list[Callable[[str, float], None]] = []

    def process(self, experiences):
        rates = []
        for group in _groups(experiences).values():
            passed = sum(is_valid_reward(e.reward) and e.reward >= self.success_threshold for e in group)
            rate = passed / len(group)
            rates.append(rate)
            for experience in group:
                experience.metrics["pass_rate"] = rate
                experience.info["pass_rate"] = rate
            for listener in self.listeners:
                listener(group[0].task_id or group[0].group_id, rate)
        mean = sum(rates) / len(rates) if rates else 0.0
        return experiences, {"mean": mean, "all_passed_groups": float(sum(r == 1.0 for r in rates)),
                             "none_passed_groups": float(sum(r == 0.0 for r in rates))}


# ---- task operators ------------------------------------------------------------------
@TASK_OPERATORS.register("length_filter")
class LengthFilter:
    """Keeps rows whose ``key`` text has min_length <= characters <= max_length."""

    def __init__(self, key: str, min_length: int = 0, max_length: int | None = None):
        self.key, self.min_length, self.max_length = key, min_length, max_length

    def keep(self, row: dict[str, Any]) -> bool:
        value = row.get(self.key)
        if value is None:
            return False
        length = len(str(value))
        return length >= self.min_length and (self.max_length is None or length <= self.max_length)


@TASK_OPERATORS.register("field_filter")
class FieldFilter:
    """Keeps rows whose ``key`` equals ``equals``, is one of ``one_of``, or (neither given)
    is present and non-empty."""

    def __init__(self, key: str, equals: Any = None, one_of: list | None = None):
        self.key, self.equals, self.one_of = key, equals, one_of

    def keep(self, row: dict[str, Any]) -> bool:
        value = row.get(self.key)
        if self.equals is not None:
            return value == self.equals
        if self.one_of is not None:
            return value in self.one_of
        return value not in (None, "", [], {})
