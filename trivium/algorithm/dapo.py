"""DAPO's overlong reward shaping (Yu et al., 2025, arXiv:2503.14476, Sec. 3.4).

Owns the soft overlong punishment, a plain function of a response's length in tokens. The
``math_dapo_reward`` function adds it to its outcome reward when its ``reward_fn_args`` say
``enable_overlong_penalty: true``. The other parts of the ``dapo`` type are components of
their own: clip-higher is ppo's ``clip_range_high``, the token-level loss is
``loss_agg_mode: token-mean``, dynamic sampling is grpo's ``std_threshold`` (groups whose
rewards are all equal leave the batch, and the trainer waits for the next explorer step to
fill its batch).
"""

from __future__ import annotations

from trivium.errors import UserError


def soft_overlong_penalty(
    response_length: int, *, max_response_length: int, cache_length: int, penalty_factor: float
) -> float:
    """0 up to ``max - cache`` tokens, then falling linearly to ``-penalty_factor`` at ``max``;
    ``-penalty_factor`` beyond ``max``.

        L_expected = max_response_length - cache_length
        penalty = 0                                           if L <  L_expected
                = (L_expected - L) / cache_length * factor    if L_expected <= L <= max
                = -factor                                     if L >  max
    """
    if cache_length <= 0 or max_response_length <= cache_length:
        raise UserError(
            "reward_fn_args: the overlong penalty needs 0 < cache_length < max_response_length, got "
            f"cache_length={cache_length}, max_response_length={max_response_length}"
        )
    expected_length = max_response_length - cache_length
    if response_length < expected_length:
        return 0.0
    if response_length > max_response_length:
        return -float(penalty_factor)
    return (expected_length - response_length) / cache_length * float(penalty_factor)


def overlong_penalty_from_args(
    response_length: int | None,
    *,
    enable_overlong_penalty: bool | None,
    penalty_factor: float | None,
    max_response_length: int | None,
    cache_length: int | None,
) -> float:
    """The penalty a reward function's ``reward_fn_args`` ask for: 0 unless enabled; enabled,
    every setting is required and so is the response's length."""
    if not enable_overlong_penalty:
        return 0.0
    missing = [
        name
        for name, value in (
            ("penalty_factor", penalty_factor),
            ("max_response_length", max_response_length),
            ("cache_length", cache_length),
        )
        if value is None
    ]
    if missing:
        raise UserError(
            f"reward_fn_args: enable_overlong_penalty needs {', '.join(missing)} as well "
            "(e.g. penalty_factor: 1.0, max_response_length: <model.max_response_tokens>, cache_length: 4096)"
        )
    if response_length is None:
        raise UserError(
            "reward_fn_args.enable_overlong_penalty needs each response's length in tokens, which this "
            "workflow does not give its reward function; use a single-turn workflow (math_workflow, "
            "math_boxed_workflow, simple)"
        )
    return soft_overlong_penalty(
        int(response_length),
        max_response_length=int(max_response_length),
        cache_length=int(cache_length),
        penalty_factor=float(penalty_factor),
    )
