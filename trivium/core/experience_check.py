"""Checking a workflow's Experience at the door, before it reaches the buffer or the trainer.

Owns ``experience_problem``: the first reason an Experience cannot be stored or trained on
(wrong types or shapes, token ids outside the vocabulary, a reward that fails the rule every
reward passes (``trivium.core.reward_check``), metrics that are not numbers, ``info`` that JSON cannot hold), or None when it is
fine. It only reads the Experience; callers decide to drop it and count it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from trivium.core.experience import Experience
from trivium.core.reward_check import MAX_ABS_REWARD, reward_problem


def experience_problem(
    experience: Experience, *, vocab_size: int | None = None, max_abs_reward: float = MAX_ABS_REWARD
) -> str | None:
    for check in (_sequence_problem, _reward_problem, _metrics_problem, _info_problem):
        problem = check(experience, vocab_size=vocab_size, max_abs_reward=max_abs_reward)
        if problem:
            return problem
    return None


def _sequence_problem(exp: Experience, *, vocab_size: int | None, **_: Any) -> str | None:
    tokens = exp.tokens
    if tokens.dim() != 1 or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        return f"tokens must be a 1-D tensor of integer ids, got {tuple(tokens.shape)} {tokens.dtype}"
    if not isinstance(exp.prompt_length, int) or isinstance(exp.prompt_length, bool):
        return f"prompt_length must be an int, got {type(exp.prompt_length).__name__}"
    if not 0 <= exp.prompt_length <= tokens.numel():
        return f"prompt_length {exp.prompt_length} is outside 0..{tokens.numel()} (the number of tokens)"
    if tokens.numel() and int(tokens.min()) < 0:
        return f"token id {int(tokens.min())} is negative"
    if vocab_size is not None and tokens.numel() and int(tokens.max()) >= vocab_size:
        return f"token id {int(tokens.max())} is outside the vocabulary (size {vocab_size})"
    response_length = exp.response_length
    for name in ("logprobs", "action_mask", "advantages", "returns"):
        value = getattr(exp, name)
        if value is None:
            continue
        if value.shape != (response_length,):
            return f"{name} has shape {tuple(value.shape)}, expected ({response_length},) (one per response token)"
    if exp.logprobs is not None and not bool(torch.isfinite(exp.logprobs).all()):
        return "logprobs contain NaN or infinite values"
    return None


def _reward_problem(exp: Experience, *, max_abs_reward: float, **_: Any) -> str | None:
    return reward_problem(exp.reward, max_abs_reward=max_abs_reward)


def _metrics_problem(exp: Experience, **_: Any) -> str | None:
    if not isinstance(exp.metrics, dict):
        return f"metrics must be a dict, got {type(exp.metrics).__name__}"
    for key, value in exp.metrics.items():
        if not isinstance(key, str):
            return f"metric name {key!r} is not a string"
        if not _is_number(value):
            return f"metric '{key}' must be a Python int or float, got {_type_name(value)} {value!r:.40}"
        if not math.isfinite(float(value)):
            return f"metric '{key}' is {value}"
    return None


def _info_problem(exp: Experience, **_: Any) -> str | None:
    if not isinstance(exp.info, dict):
        return f"info must be a dict, got {type(exp.info).__name__}"
    try:
        # The durable buffers store info as JSON: only what JSON holds exactly may pass.
        json.dumps(exp.info, allow_nan=True, default=_refuse)
    except (TypeError, ValueError) as error:
        return f"info cannot be stored as JSON: {error}"
    return None


def _is_number(value: Any) -> bool:
    # float and int subclasses (numpy.float64 is one) serialize as JSON numbers; bool is not a score.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _refuse(value: Any) -> Any:
    raise TypeError(
        f"a {_type_name(value)} value ({str(value)[:40]}) is not a JSON type; convert it with float(), int() or str()"
    )
