"""Built-in rewards for questions with one final answer: math, accuracy and format.

Owns ``math_reward``, ``accuracy_reward`` and ``format_reward``. The answer is found by
``trivium.rewards.answers``; none of these functions raises on a malformed response.
"""

from __future__ import annotations

from typing import Any

from trivium.algorithm.dapo import overlong_penalty_from_args
from trivium.rewards.answers import (
    answers_match,
    extract_answer,
    extract_boxed,
    follows_answer_format,
    ground_truth_answer,
    normalize_answer,
)
from trivium.rewards.registry import REWARD_FNS


@REWARD_FNS.register("math_reward")
def math_reward(
    *,
    prompt: str,
    response: str,
    ground_truth: Any,
    format_weight: float = 0.0,
    answer_format: str = "any",
    tolerance: float = 1e-6,
    **kwargs: Any,
) -> dict[str, float]:
    """Answer correctness, plus an optional bonus for stating the answer in the expected format.

    Components:
      ``accuracy``: 1.0 when the extracted answer equals the ground truth as a number
        (``0.5`` == ``1/2`` == ``\\frac{1}{2}``, within ``tolerance``) or as a normalized
        string; else 0.0.
      ``format``: 1.0 when the response follows ``answer_format`` (see
        ``follows_answer_format``); else 0.0. Reported always, added only with a weight.
      ``reward`` = accuracy + format_weight * format. With the default ``format_weight=0``
        the reward is exactly the accuracy.
    """
    accuracy = float(answers_match(extract_answer(response), ground_truth_answer(ground_truth), tolerance))
    well_formatted = float(follows_answer_format(response, answer_format))
    return {
        "reward": accuracy + format_weight * well_formatted,
        "accuracy": accuracy,
        "format": well_formatted,
    }


@REWARD_FNS.register("accuracy_reward")
def accuracy_reward(*, prompt: str, response: str, ground_truth: Any, **kwargs: Any) -> float:
    """1.0 when the extracted answer and the ground truth are the same normalized string.

    Stricter than ``math_reward``: ``0.5`` and ``1/2`` differ here. Normalizing folds case,
    collapses whitespace and drops surrounding ``$``/quotes and a final period.
    """
    predicted = extract_answer(response)
    reference = ground_truth_answer(ground_truth)
    if predicted is None or reference is None:
        return 0.0
    return float(normalize_answer(predicted) == normalize_answer(reference) != "")


@REWARD_FNS.register("format_reward")
def format_reward(
    *, prompt: str, response: str, ground_truth: Any = None, answer_format: str = "answer_tag", **kwargs: Any
) -> float:
    """1.0 when the response gives its final answer in the expected format, else 0.0.

    ``answer_format`` is ``answer_tag`` (one ``<answer>X</answer>`` at the end, the format
    the built-in workflows ask for), ``boxed`` (one ``\\boxed{X}``) or ``any``.
    """
    return float(follows_answer_format(response, answer_format))


@REWARD_FNS.register("math_boxed_reward")
def math_boxed_reward(
    *, prompt: str, response: str, ground_truth: Any, format_score: float = 0.0, tolerance: float = 1e-6, **kwargs: Any
) -> dict[str, float]:
    """Correctness of the answer in the response's last ``\\boxed{}``.

    Components: ``accuracy`` (1.0 when the boxed answer equals the ground truth as a number or
    a normalized string), ``format`` (1.0 when a ``\\boxed{}`` is present). ``reward`` is the
    accuracy; a wrong but boxed answer earns ``format_score`` instead of 0.
    """
    boxed = extract_boxed(response)
    accuracy = float(answers_match(boxed, ground_truth_answer(ground_truth), tolerance)) if boxed is not None else 0.0
    has_box = float(boxed is not None)
    return {"reward": accuracy or format_score * has_box, "accuracy": accuracy, "format": has_box}


@REWARD_FNS.register("math_dapo_reward")
def math_dapo_reward(
    *,
    prompt: str,
    response: str,
    ground_truth: Any,
    tolerance: float = 1e-6,
    response_length: int | None = None,
    enable_overlong_penalty: bool | None = None,
    penalty_factor: float | None = None,
    max_response_length: int | None = None,
    cache_length: int | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """DAPO's outcome reward: +1 for a correct final answer, -1 otherwise, plus, with
    ``enable_overlong_penalty``, the soft overlong punishment of a response of
    ``response_length`` tokens (``trivium.algorithm.dapo.soft_overlong_penalty``).

    Components: ``reward`` (+1 or -1, plus the penalty), ``accuracy`` (1.0 or 0.0) and
    ``overlong_penalty`` (0 or below).
    """
    accuracy = float(answers_match(extract_answer(response), ground_truth_answer(ground_truth), tolerance))
    penalty = overlong_penalty_from_args(
        response_length,
        enable_overlong_penalty=enable_overlong_penalty,
        penalty_factor=penalty_factor,
        max_response_length=max_response_length,
        cache_length=cache_length,
    )
    return {"reward": 2.0 * accuracy - 1.0 + penalty, "accuracy": accuracy, "overlong_penalty": penalty}


math_dapo_reward.reads_response_length = True
