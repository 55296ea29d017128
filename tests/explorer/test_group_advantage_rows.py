"""The explorer trains on the rows a group estimator keeps: grpo's std_threshold drops groups."""

import pytest
import torch

from trivium.core.experience import Experience
from trivium.explorer.explorer import Explorer


def experiences(rewards, groups, logprobs=None):
    rows = []
    for index, (reward, group) in enumerate(zip(rewards, groups)):
        rows.append(Experience(
            tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2, reward=reward, group_id=group,
            logprobs=torch.tensor([logprobs[index]] * 2) if logprobs else torch.zeros(2),
        ))
    return rows


def explorer(**advantage_fn_args):
    return Explorer(taskset_reader=None, writer=None, runner_pool=None, batch_size=1, advantage_fn="grpo",
                    advantage_fn_args=advantage_fn_args)


def test_std_threshold_drops_flat_and_lone_groups_before_the_buffer():
    batch = experiences([1.0, 0.0, 1.0, 1.0, 3.0], ["a", "a", "b", "b", "c"])
    kept = explorer(std_threshold=0.0).compute_group_advantages(batch)
    assert [e.group_id for e in kept] == ["a", "a"]
    # (1 - 0.5) / (0.7071 + 1e-6) and its opposite
    assert [float(e.advantages[0]) for e in kept] == pytest.approx([0.5 / (0.5 ** 0.5 + 1e-6), -0.5 / (0.5 ** 0.5 + 1e-6)])


def test_duplicated_groups_get_fresh_experience_ids():
    batch = experiences([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])
    kept = explorer(std_threshold=0.0, duplicate_experiences=True).compute_group_advantages(batch)
    assert [e.group_id for e in kept] == ["a", "a", "a", "a"]
    assert len({e.eid for e in kept}) == 4


def test_rank_penalty_reads_each_rows_mean_sampling_logprob():
    # mean logprobs [-0.5, -2.0, -1.0] -> scores [1, 1, 0] become [2/3, 1, 0] (see the reference tests)
    batch = experiences([1.0, 1.0, 0.0], ["a"] * 3, logprobs=[-0.5, -2.0, -1.0])
    kept = explorer(rank_penalty=0.5, epsilon=0.0).compute_group_advantages(batch)
    std = (((2 / 3 - 5 / 9) ** 2 + (4 / 9) ** 2 + (5 / 9) ** 2) / 2) ** 0.5
    assert [float(e.advantages[0]) for e in kept] == pytest.approx([(1 / 9) / std, (4 / 9) / std, -(5 / 9) / std],
                                                                   abs=1e-5)
