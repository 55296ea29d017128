"""What an Experience must satisfy to pass the door into the buffer."""

import json

import numpy as np
import pytest
import torch

from trivium.buffer.codec import experience_to_json
from trivium.core.experience import Experience
from trivium.core.experience_check import experience_problem


def sample(**fields):
    values = dict(tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2, reward=1.0,
                  logprobs=torch.tensor([-0.1, -0.2]))
    values.update(fields)
    return Experience(**values)


def test_a_well_formed_experience_passes_and_stores_as_json():
    exp = sample(info={"source": "math", "scores": [1, 2.5]}, metrics={"accuracy": 1, "format": 0.5})
    assert experience_problem(exp, vocab_size=5) is None
    assert json.loads(experience_to_json(exp))["info"] == {"source": "math", "scores": [1, 2.5]}


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"info": {"count": np.int64(3)}},
         "info cannot be stored as JSON: a numpy.int64 value (3) is not a JSON type; convert it with float(), int() or str()"),
        ({"info": {"scorer": object()}}, "info cannot be stored as JSON: a object value"),
        ({"metrics": {"accuracy": "1.0"}}, "metric 'accuracy' must be a Python int or float, got str '1.0'"),
        ({"metrics": {"accuracy": float("nan")}}, "metric 'accuracy' is nan"),
        ({"reward": 1e308}, "reward 1e+308 is beyond ±1e+06; check the reward function"),
        ({"reward": float("nan")}, "reward is nan"),
        ({"reward": None}, "no reward"),
        ({"reward": "1"}, "reward must be a Python int or float, got str"),
        ({"tokens": torch.tensor([1, 2, 3, 9])}, "token id 9 is outside the vocabulary (size 5)"),
        ({"tokens": torch.tensor([1, 2, -1, 3])}, "token id -1 is negative"),
        ({"logprobs": torch.tensor([-0.1, -0.2, -0.3])}, "logprobs has shape (3,), expected (2,) (one per response token)"),
        ({"action_mask": torch.tensor([True])}, "action_mask has shape (1,), expected (2,) (one per response token)"),
        ({"logprobs": torch.tensor([-0.1, float("nan")])}, "logprobs contain NaN or infinite values"),
    ],
)
def test_bad_experiences_are_named_by_their_first_problem(fields, message):
    problem = experience_problem(sample(**fields), vocab_size=5)
    assert problem is not None and problem.startswith(message)


def test_numpy_float64_is_a_float_and_passes():
    assert experience_problem(sample(reward=np.float64(0.5), metrics={"m": np.float64(1.0)})) is None


def test_reward_limit_is_a_parameter():
    assert experience_problem(sample(reward=5e6), max_abs_reward=1e7) is None


def test_prompt_length_beyond_the_tokens_is_refused_on_construction_and_at_the_door():
    with pytest.raises(ValueError, match=r"prompt_length 7 is outside 0..4"):
        sample(prompt_length=7)
    exp = sample()
    exp.prompt_length = 7
    assert experience_problem(exp) == "prompt_length 7 is outside 0..4 (the number of tokens)"
