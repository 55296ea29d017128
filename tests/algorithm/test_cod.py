"""cod: step-wise GRPO over episodes with a group, batch or no spread, checked by hand."""

import math

import pytest
import torch

from trivium.algorithm import ADVANTAGE_FNS, requires_episodes, requires_groups
from trivium.algorithm.advantages import row_selection
from trivium.errors import UserError


def run(rewards, groups, episodes, **args):
    rewards = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
    inputs = {
        "token_level_rewards": rewards,
        "response_mask": torch.ones_like(rewards),
        "group_ids": torch.tensor(groups),
        "episode_ids": torch.tensor(episodes),
    }
    fn = ADVANTAGE_FNS.get("cod")
    return fn(**inputs, **args), row_selection(fn)(**inputs, **args)


def test_cod_scores_each_episode_by_its_last_row_and_broadcasts_it():
    # episode 0 rows [0, 1] (last 1), episode 1 rows [5, 0] (last 0): scores [1, 0] -> +-0.5 / 0.7071
    (advantages, _), kept = run([0, 1, 5, 0], [0, 0, 0, 0], [0, 0, 1, 1], epsilon=0.0)
    a = 0.5 / math.sqrt(0.5)
    assert advantages[:, 0].tolist() == pytest.approx([a, a, -a, -a])
    assert kept is None
    fn = ADVANTAGE_FNS.get("cod")
    assert requires_groups(fn) and requires_episodes(fn)


def test_std_cal_level_none_only_subtracts_the_group_mean():
    # scores [3, 1]: mean 2 -> [1, -1]; a lone episode (group 1, score 4) keeps 4
    (advantages, _), _ = run([3, 1, 4], [0, 0, 1], [0, 1, 2], std_cal_level="none")
    assert advantages[:, 0].tolist() == pytest.approx([1.0, -1.0, 4.0])


def test_std_cal_level_batch_divides_by_the_spread_of_every_last_row_score():
    # scores [3, 1, 4]: batch std = std([3, 1, 4]) = 1.5275; group 0 mean 2, lone group mean 0
    (advantages, _), _ = run([3, 1, 4], [0, 0, 1], [0, 1, 2], std_cal_level="batch", epsilon=0.0)
    spread = float(torch.tensor([3.0, 1.0, 4.0]).std())
    assert advantages[:, 0].tolist() == pytest.approx([1 / spread, -1 / spread, 4 / spread])


def test_std_threshold_drops_flat_and_lone_groups_and_step_norm_shares_the_advantage():
    (advantages, _), kept = run(
        [0, 1, 0, 0, 2, 2],
        [0, 0, 0, 0, 1, 1],
        [0, 0, 1, 1, 2, 3],
        std_threshold=0.0,
        enable_step_norm=True,
        epsilon=0.0,
    )
    assert kept.tolist() == [0, 1, 2, 3]
    a = 0.5 / math.sqrt(0.5) / 2  # two rows per episode
    assert advantages[:4, 0].tolist() == pytest.approx([a, a, -a, -a])


def test_the_end_to_end_causal_form_is_refused_with_its_key():
    with pytest.raises(UserError, match="iterative_hint_e2e_causal"):
        run([1, 0], [0, 0], [0, 1], iterative_hint_e2e_causal=True)
    with pytest.raises(UserError, match="std_cal_level"):
        run([1, 0], [0, 0], [0, 1], std_cal_level="task")
