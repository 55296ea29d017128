"""Replay priority: which stored experience a queue hands out next, and when to retire it.

Owns the ``PRIORITY_FUNCTIONS`` registry and ``ReplayPolicy``. A priority function is built
from ``priority_fn_args`` and returns a scorer ``(experience, use_count) -> float | None``;
the highest score is read first, ``None`` retires the experience for good. Scores are
computed when an experience enters (or re-enters) the queue, not at every read.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.registry import Registry, RegistryError

Scorer = Callable[[Experience, int], "float | None"]

PRIORITY_FUNCTIONS: Registry[Callable[..., Scorer]] = Registry("replay priority function")


@PRIORITY_FUNCTIONS.register("linear_decay")
def linear_decay(*, decay: float = 2.0) -> Scorer:
    """priority = model_version - decay * use_count.

    Fresh experiences from the newest policy come first; each reuse costs ``decay``
    versions of freshness, so with decay=2 an experience read once ranks like an unread one
    two versions older.
    """
    if decay < 0:
        raise UserError(f"replay_buffer.priority_fn_args.decay must be >= 0, got {decay}")

    def score(experience: Experience, use_count: int) -> float:
        return experience.model_version - decay * use_count

    return score


@PRIORITY_FUNCTIONS.register("linear_decay_use_count_control_randomization")
def linear_decay_use_count_control_randomization(
    *, decay: float = 2.0, use_count_limit: int = 3, sigma: float = 1.0, seed: int | None = None
) -> Scorer:
    """``linear_decay`` plus Gaussian noise of std ``sigma``, and a hard reuse limit.

    An experience already read ``use_count_limit`` times is retired (never read again).
    The noise mixes experiences of neighbouring versions so replay batches are not
    dominated by one policy version; ``seed`` makes the mixing reproducible.
    """
    if use_count_limit < 1:
        raise UserError(
            f"replay_buffer.priority_fn_args.use_count_limit must be >= 1, got {use_count_limit}"
        )
    if sigma < 0:
        raise UserError(f"replay_buffer.priority_fn_args.sigma must be >= 0, got {sigma}")
    base = linear_decay(decay=decay)
    rng = random.Random(seed)

    def score(experience: Experience, use_count: int) -> float | None:
        if use_count >= use_count_limit:
            return None
        return base(experience, use_count) + (rng.gauss(0.0, sigma) if sigma else 0.0)

    return score


@dataclass
class ReplayPolicy:
    # Seconds before a read experience may be read again; None: each is read once.
    reuse_cooldown_time: float | None
    score: Scorer

    @classmethod
    def from_config(cls, replay_config: Any) -> ReplayPolicy | None:
        """None when replay is off (``replay_buffer`` missing or ``enable: false``)."""
        if replay_config is None or not replay_config.enable:
            return None
        cooldown = replay_config.reuse_cooldown_time
        if cooldown is not None and cooldown < 0:
            raise UserError(f"replay_buffer.reuse_cooldown_time must be >= 0 or null, got {cooldown}")
        name = replay_config.priority_fn
        args = dict(replay_config.priority_fn_args)
        try:
            builder = PRIORITY_FUNCTIONS.get(name)
        except RegistryError as error:
            raise UserError(f"replay_buffer.priority_fn: {error}") from error
        try:
            scorer = builder(**args)
        except TypeError as error:
            raise UserError(f"replay_buffer.priority_fn_args for '{name}': {error}") from error
        return cls(reuse_cooldown_time=None if cooldown is None else float(cooldown), score=scorer)
