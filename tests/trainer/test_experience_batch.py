"""ExperienceBatch.from_experiences: the padded layout, checked cell by cell on a ragged batch."""

import torch

from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience


def test_ragged_rows_are_left_padded_prompts_and_right_padded_responses():
    a = Experience(
        tokens=[11, 12, 13, 21, 22], prompt_length=3, logprobs=[-0.1, -0.2], action_mask=[True, False],
        reward=1.0, advantages=[0.5, 0.5], returns=[1.0, 2.0], model_version=3,
    )
    b = Experience(tokens=[14, 23, 24, 25], prompt_length=1, reward=None, is_expert=True)
    c = Experience(tokens=[15, 16], prompt_length=2, logprobs=[], reward=0.25)  # empty response
    d = Experience(tokens=[17, 26], prompt_length=1, logprobs=[-0.7], prompt_truncated=True, model_version=1)

    batch = ExperienceBatch.from_experiences([a, b, c, d], pad_token_id=0)

    assert batch.prompt_length == 3 and batch.response_length == 3
    assert batch.input_ids.tolist() == [
        [11, 12, 13, 21, 22, 0],
        [0, 0, 14, 23, 24, 25],
        [0, 15, 16, 0, 0, 0],
        [0, 0, 17, 26, 0, 0],
    ]
    assert batch.attention_mask.tolist() == [
        [True, True, True, True, True, False],
        [False, False, True, True, True, True],
        [False, True, True, False, False, False],
        [False, False, True, True, False, False],
    ]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3], [0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]]
    # b's action mask defaults to all ones; d's prompt was truncated, so nothing of it is trained.
    assert batch.response_mask.tolist() == [[1, 0, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0]]
    assert torch.allclose(batch.old_logprobs, torch.tensor([[-0.1, -0.2, 0], [0, 0, 0], [0, 0, 0], [-0.7, 0, 0]]))
    assert batch.advantages.tolist() == [[0.5, 0.5, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert batch.returns.tolist() == [[1.0, 2.0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert batch.rewards.tolist() == [1.0, 0.0, 0.25, 0.0]
    assert batch.model_versions.tolist() == [3, 0, 0, 1]
    assert batch.expert_mask.tolist() == [False, True, False, False]
    assert batch.num_tokens == 5 + 4 + 2 + 2


def test_per_token_values_longer_than_the_response_are_cut():
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=[-1.0, -2.0, -9.0])
    batch = ExperienceBatch.from_experiences([exp])
    assert batch.old_logprobs.tolist() == [[-1.0, -2.0]]
