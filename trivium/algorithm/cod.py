"""The ``cod`` advantage estimator: step-wise GRPO over episodes with a choice of spread.

Owns ``cod``, under the name Trinity-RFT gives it. Its standard form is ``multi_step_grpo``
(episodes as a group's samples, each scored by its last row, the advantage broadcast to every
row of the episode) with one more spread: ``std_cal_level`` is ``group`` (each group's sample
std), ``batch`` (the std of every episode's last-row score in the step) or ``none`` (no
division: ``a_e = s_e - mean_g``). ``std_threshold`` drops flat groups and groups of one
episode; ``enable_step_norm`` divides each row's advantage by its episode's number of rows.

The reference's ``iterative_hint_e2e_causal`` form (meta-trajectories of hint and solve
episodes scored by their rewards-to-go) is not built: setting it raises an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.algorithm.advantages import register_advantage_fn
from trivium.algorithm.multi_step import multi_step_grpo_advantages, multi_step_grpo_kept_rows
from trivium.errors import UserError
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

# std_cal_level -> multi_step_grpo's spread arguments; ``none`` divides by nothing.
COD_SPREADS = {
    "group": {"std_cal_level": "group", "std_normalize": True},
    "batch": {"std_cal_level": "batch", "std_normalize": True},
    "none": {"std_cal_level": "group", "std_normalize": False},
}


def _multi_step_args(std_cal_level: str, iterative_hint_e2e_causal: bool) -> dict:
    if iterative_hint_e2e_causal:
        raise UserError(
            "advantage_fn_args.iterative_hint_e2e_causal: cod's end-to-end causal form (hint and solve "
            "episodes of one meta-trajectory) is not implemented; remove the key (or set it false) for "
            "cod's step-wise GRPO form"
        )
    if std_cal_level not in COD_SPREADS:
        raise UserError(
            f"advantage_fn_args.std_cal_level must be one of {', '.join(COD_SPREADS)}; got {std_cal_level!r}"
        )
    return dict(COD_SPREADS[std_cal_level])


@register_advantage_fn("cod", needs_group=True, needs_episodes=True)
@no_grad
def cod_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    episode_ids: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    std_cal_level: str = "group",
    std_threshold: float | None = None,
    iterative_hint_e2e_causal: bool = False,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``multi_step_grpo`` with ``std_cal_level`` ``group``, ``batch`` or ``none`` (no division).

    token_level_rewards, response_mask: (B, R); group_ids, episode_ids: (B,). Returns
    (advantages, returns), both (B, R) and equal.
    """
    return multi_step_grpo_advantages(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        group_ids=group_ids,
        episode_ids=episode_ids,
        epsilon=epsilon,
        enable_step_norm=enable_step_norm,
        std_threshold=std_threshold,
        **_multi_step_args(std_cal_level, iterative_hint_e2e_causal),
    )


@no_grad
def cod_kept_rows(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    episode_ids: torch.Tensor | None = None,
    std_threshold: float | None = None,
    **_ignored,
) -> torch.Tensor | None:
    """The rows cod trains on: those of groups of several episodes spread above ``std_threshold``."""
    return multi_step_grpo_kept_rows(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        group_ids=group_ids,
        episode_ids=episode_ids,
        std_threshold=std_threshold,
    )


cod_advantages.kept_rows = cod_kept_rows
# Trinity-RFT's settings of the end-to-end form and its deprecated flag; refused when they would act.
cod_advantages.accepted_unused_args = (
    "e2e_causal_returns_style",
    "e2e_causal_returns_window",
    "e2e_causal_returns_gamma",
    "e2e_causal_baseline",
    "mask_format_issue_exp",
    "red_weight_temp",
    "red_weight_adaptive_temp",
    "red_weight_adaptive_version",
    "red_weight_adaptive_level",
    "red_weight_adv_shift",
)
