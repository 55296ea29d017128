"""dapo: clip-higher, token-mean, dynamic sampling and the soft overlong punishment, by hand."""

import pytest
import torch

from trivium.algorithm import ADVANTAGE_FNS, PRESETS
from trivium.algorithm.advantages import row_selection
from trivium.algorithm.dapo import soft_overlong_penalty
from trivium.errors import UserError
from trivium.rewards.math_rewards import math_dapo_reward
from trivium.rewards.registry import reads_response_length, score


@pytest.mark.parametrize(
    ("length", "expected"),
    # max 20, cache 4, factor 2: no penalty below 16, -2 * (L - 16) / 4 from 16 to 20, -2 beyond
    [(10, 0.0), (15, 0.0), (16, 0.0), (17, -0.5), (19, -1.5), (20, -2.0), (21, -2.0), (500, -2.0)],
)
def test_soft_overlong_penalty_falls_linearly_over_the_cache(length, expected):
    assert soft_overlong_penalty(
        length, max_response_length=20, cache_length=4, penalty_factor=2.0
    ) == pytest.approx(expected)


def test_the_cache_must_fit_inside_the_maximum_length():
    with pytest.raises(UserError, match="cache_length"):
        soft_overlong_penalty(5, max_response_length=4, cache_length=4, penalty_factor=1.0)


def test_math_dapo_reward_adds_the_penalty_to_plus_or_minus_one():
    args = {
        "enable_overlong_penalty": True,
        "penalty_factor": 1.0,
        "max_response_length": 20,
        "cache_length": 4,
    }
    assert reads_response_length(math_dapo_reward)
    right, components = score(
        math_dapo_reward, prompt="", response="Answer: 7", ground_truth="7", response_length=18, **args
    )
    # +1 correct, (16 - 18) / 4 = -0.5
    assert right == pytest.approx(0.5)
    assert components == {"accuracy": 1.0, "overlong_penalty": -0.5}
    wrong, _ = score(
        math_dapo_reward, prompt="", response="Answer: 8", ground_truth="7", response_length=30, **args
    )
    assert wrong == pytest.approx(-2.0)
    plain, _ = score(math_dapo_reward, prompt="", response="Answer: 7", ground_truth="7", response_length=30)
    assert plain == 1.0


def test_an_enabled_penalty_without_its_lengths_names_the_missing_keys():
    with pytest.raises(UserError, match="max_response_length, cache_length"):
        math_dapo_reward(
            prompt="",
            response="x",
            ground_truth="1",
            response_length=3,
            enable_overlong_penalty=True,
            penalty_factor=1.0,
        )


def test_the_dapo_preset_clips_higher_than_lower_and_drops_flat_groups():
    preset = PRESETS["dapo"]
    assert (preset.advantage_fn, preset.policy_loss_fn, preset.kl_loss_fn) == ("grpo", "ppo", "none")
    assert preset.loss_agg_mode == "token-mean"
    assert preset.policy_loss_fn_args == {"clip_range_low": 0.2, "clip_range_high": 0.28}
    # dynamic sampling: groups [1, 1] and [-1, -1] are flat and leave; [1, -1] stays
    grpo = ADVANTAGE_FNS.get("grpo")
    rewards = torch.tensor([[1.0], [1.0], [1.0], [-1.0], [-1.0], [-1.0]])
    kept = row_selection(grpo)(
        token_level_rewards=rewards,
        response_mask=torch.ones_like(rewards),
        group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
        **preset.advantage_fn_args,
    )
    assert kept.tolist() == [2, 3]


def sample(group, reward, accuracy=None, finish_reason="stop"):
    from trivium.core.experience import Experience

    metrics = {} if accuracy is None else {"accuracy": accuracy}
    return Experience(
        tokens=torch.arange(6),
        prompt_length=2,
        action_mask=torch.ones(4, dtype=torch.bool),
        reward=reward,
        group_id=group,
        metrics=metrics,
        info={"finish_reason": finish_reason},
    )


def test_the_outcome_based_dynamic_sampling_operator_keeps_mixed_groups_only():
    from trivium.buffer.operators import EXPERIENCE_OPERATORS

    operator = EXPERIENCE_OPERATORS.get("dapo_dynamic_sampling")()
    # a: both correct although the overlong penalty spread their rewards; b: mixed; c: all wrong; d: alone
    batch = [
        sample("a", 1.0, 1.0),
        sample("a", 0.5, 1.0),
        sample("b", 1.0, 1.0),
        sample("b", -1.0, 0.0),
        sample("c", -1.0, 0.0),
        sample("c", -1.2, 0.0),
        sample("d", 1.0, 1.0),
    ]
    kept, metrics = operator.process(batch)
    assert [e.group_id for e in kept] == ["b", "b"]
    assert metrics == {"dropped": 5.0, "dropped_all_correct": 2.0, "dropped_all_wrong": 2.0}


def test_mask_response_truncated_trains_no_token_of_a_cut_response():
    from trivium.buffer.operators import EXPERIENCE_OPERATORS

    cut, whole = sample("a", 1.0, finish_reason="length"), sample("a", 0.0)
    kept, metrics = EXPERIENCE_OPERATORS.get("mask_response_truncated")().process([cut, whole])
    assert kept == [cut, whole] and metrics == {"masked_truncated": 1.0}
    assert not cut.action_mask.any() and len(cut.action_mask) == 4 and whole.action_mask.all()
