"""Task priorities: the order and top-k cut of a taskset after the task pipeline.

Owns how the Data-Juicer stats of a task row become two scores and one priority:

- ``quality`` is the mean of the quality stats the row has (alnum_ratio, stopwords_ratio,
  llm_quality_score: higher is better; char_rep_ratio, flagged_words_ratio,
  special_char_ratio, word_rep_ratio: lower is better, so ``1 - value`` counts);
- ``difficulty`` is the mean of the difficulty stats it has (perplexity, llm_difficulty_score:
  higher is harder; lang_score: lower is harder);
- each stat is min-max normalised over its fixed range, or over the taskset's own minimum and
  maximum where the range is open (perplexity); a group the row has no stat of scores 0;
- ``priority = sum(weight[feature] * score[feature])`` over ``priority_weights``.

Rows are then ordered by priority, highest first (ties keep file order), and the first
``top_k`` kept (-1: all). The stats come from the pipeline's Data-Juicer operators and from a
row's own ``__dj__stats__`` field (a taskset Data-Juicer scored before). Nothing here runs an
operator or reads a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trivium.errors import UserError

# Where Data-Juicer keeps the stats of a sample (``data_juicer.utils.constant.Fields.stats``).
STATS_FIELD = "__dj__stats__"
# stat -> (higher means a better score, (low, high) or None: the taskset's own minimum and maximum)
SCORE_GROUPS: dict[str, dict[str, tuple[bool, tuple[float, float] | None]]] = {
    "quality": {
        "alnum_ratio": (True, (0.0, 1.0)),
        "char_rep_ratio": (False, (0.0, 1.0)),
        "flagged_words_ratio": (False, (0.0, 1.0)),
        "special_char_ratio": (False, (0.0, 1.0)),
        "stopwords_ratio": (True, (0.0, 1.0)),
        "word_rep_ratio": (False, (0.0, 1.0)),
        "llm_quality_score": (True, (0.0, 1.0)),
    },
    "difficulty": {
        "perplexity": (True, None),
        "lang_score": (False, (0.0, 1.0)),
        "llm_difficulty_score": (True, (0.0, 1.0)),
    },
}
# Weights when only top_k is set: quality counts for, difficulty against.
DEFAULT_WEIGHTS = {"quality": 1.0, "difficulty": -0.7}
# Features other systems weigh that cannot apply before exploring, and why.
REFUSED_FEATURES = {
    "usage_frequency": "every task's use count is 0 when the task pipeline runs (before exploring)",
    "diversity": "no diversity score is computed for a task row",
}


def priority_problems(priority_weights: Mapping[str, Any], top_k: int) -> list[tuple[str, str]]:
    """(key suffix, message) for what is wrong with ``priority_weights`` and ``top_k``."""
    problems = []
    for feature, weight in (priority_weights or {}).items():
        if feature in REFUSED_FEATURES:
            problems.append(
                (
                    "priority_weights",
                    f"'{feature}' cannot be weighed here: {REFUSED_FEATURES[feature]}; remove it",
                )
            )
        elif feature not in SCORE_GROUPS:
            problems.append(
                ("priority_weights", f"unknown feature '{feature}'; the features are {sorted(SCORE_GROUPS)}")
            )
        elif not isinstance(weight, (int, float)) or isinstance(weight, bool):
            problems.append(
                ("priority_weights", f"the weight of '{feature}' must be a number, got {weight!r}")
            )
    if not isinstance(top_k, int) or top_k == 0 or top_k < -1:
        problems.append(("top_k", f"must be -1 (keep every task) or at least 1, got {top_k!r}"))
    return problems


def row_stats(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric stats a row carries in its own ``__dj__stats__`` field."""
    stats = row.get(STATS_FIELD) if isinstance(row, Mapping) else None
    if isinstance(stats, list):  # Data-Juicer keeps one stats dict per sample in a list at times
        stats = stats[0] if stats else None
    if not isinstance(stats, Mapping):
        return {}
    return {k: float(v) for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def group_scores(stats_by_row: Mapping[int, Mapping[str, float]]) -> dict[int, dict[str, float]]:
    """Each row's ``quality`` and ``difficulty`` score from its stats (see the module docstring)."""
    open_ranges: dict[str, tuple[float, float]] = {}
    for group in SCORE_GROUPS.values():
        for stat, (_, fixed) in group.items():
            values = [stats[stat] for stats in stats_by_row.values() if stat in stats]
            if fixed is None and values:
                open_ranges[stat] = (min(values), max(values))
    scores = {}
    for number, stats in stats_by_row.items():
        scores[number] = {}
        for group_name, group in SCORE_GROUPS.items():
            normalised = []
            for stat, (higher_is_better, fixed) in group.items():
                if stat not in stats:
                    continue
                low, high = fixed if fixed is not None else open_ranges[stat]
                # (value - low) / (high - low); one value over the whole taskset normalises to 0
                value = (stats[stat] - low) / (high - low) if high > low else 0.0
                normalised.append(value if higher_is_better else 1.0 - value)
            scores[number][group_name] = sum(normalised) / len(normalised) if normalised else 0.0
    return scores


def order_by_priority(
    row_numbers: list[int],
    stats_by_row: Mapping[int, Mapping[str, float]],
    priority_weights: Mapping[str, float],
    top_k: int,
) -> tuple[list[int], dict[int, float]]:
    """(``row_numbers`` by priority, highest first, cut to ``top_k``; each row's priority)."""
    graded = [
        n for n in row_numbers if any(s in stats_by_row.get(n, {}) for g in SCORE_GROUPS.values() for s in g)
    ]
    if row_numbers and not graded:
        known = sorted(stat for group in SCORE_GROUPS.values() for stat in group)
        raise UserError(
            "data_processor.task_pipeline.priority_weights/top_k: no task has a stat a priority is made of "
            f"({', '.join(known)}); add a Data-Juicer filter that computes one (e.g. alphanumeric_filter, "
            "character_repetition_filter, special_characters_filter, word_repetition_filter) to the operators"
        )
    scores = group_scores({n: stats_by_row.get(n, {}) for n in row_numbers})
    weights = dict(priority_weights) or DEFAULT_WEIGHTS
    # priority = sum over features of weight * score
    priorities = {n: sum(w * scores[n][feature] for feature, w in weights.items()) for n in row_numbers}
    ordered = sorted(row_numbers, key=lambda n: -priorities[n])  # stable: ties keep file order
    return (ordered if top_k == -1 else ordered[:top_k]), priorities
