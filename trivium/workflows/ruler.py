"""RULER judging: one judge reads every response to a task and scores them against each other.

Owns the judge's prompt, the parsing of its verdict and the judge's own reward when the ground
truth is known. Pure functions of text and numbers; the workflows that call a model are in
``ruler_workflow.py``.

The verdict is parsed from the judge's last bracketed list (``[0.2, 1, 0.7]``): it must be a
list of exactly one number per response, read as a Python literal (never evaluated as code);
each number must pass the rule every reward passes (``trivium.core.reward_check``) and is
clipped to [0, 1]. Anything else (no list, text in it, the wrong length) is a
malformed verdict and parses to None.
"""

from __future__ import annotations

import ast

from trivium.core.reward_check import reward_problem

JUDGE_SYSTEM_PROMPT = (
    "You are an impartial grader. You will see one question and {count} candidate solutions. "
    "Compare the solutions with each other, judge how well each one answers the question, and "
    "give each a score between 0 and 1."
)

JUDGE_INSTRUCTIONS = (
    "Score every candidate between 0 and 1 for how well it answers the question. You may "
    "reason briefly first. End your reply with the scores as one list, in candidate order, "
    "like [score of candidate 1, score of candidate 2, ...], with exactly {count} numbers."
)


def ruler_messages(*, question: str, responses: list[str]) -> list[dict]:
    """The chat a RULER judge answers: the question, then each candidate numbered from 1."""
    candidates = "\n\n".join(f"Candidate {number}:\n{text}" for number, text in enumerate(responses, start=1))
    user = f"Question:\n{question}\n\n{candidates}\n\n{JUDGE_INSTRUCTIONS.format(count=len(responses))}"
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT.format(count=len(responses))},
        {"role": "user", "content": user},
    ]


def parse_ruler_scores(text: str, *, count: int) -> list[float] | None:
    """The ``count`` scores of the last ``[...]`` in ``text``, each clipped to [0, 1]; None if malformed."""
    text = text or ""
    end = text.rfind("]")
    start = text.rfind("[", 0, end) if end != -1 else -1
    if start == -1:
        return None
    try:
        values = ast.literal_eval(text[start : end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(values, list) or len(values) != count:
        return None
    scores = []
    for value in values:
        if reward_problem(value) is not None:  # a score is a reward: the same rule applies
            return None
        # s = min(1, max(0, v))
        scores.append(min(1.0, max(0.0, float(value))))
    return scores


def judging_reward(*, scores: list[float], targets: list[float]) -> float:
    """How close a verdict is to the ground truth: 1 - mean_i |s_i - t_i|, in [0, 1].

    scores, targets: (n,) each in [0, 1]; targets are the responses' ground-truth rewards
    clipped to [0, 1].
    """
    if len(scores) != len(targets) or not scores:
        raise ValueError(f"a verdict of {len(scores)} scores cannot be compared with {len(targets)} targets")
    # r = 1 - (1/n) * sum_i |s_i - t_i|
    return 1.0 - sum(abs(score - target) for score, target in zip(scores, targets)) / len(scores)


def clipped_target(reward: float) -> float:
    """A ground-truth reward as a judge's target: clipped to [0, 1]."""
    return min(1.0, max(0.0, float(reward)))
