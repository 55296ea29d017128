import math

import pytest

from trivium.registry import RegistryError
from trivium.rewards import REWARD_FNS, resolve_reward_fn, score


def constant(value):
    def fn(*, prompt, response, ground_truth, **kwargs):
        return value

    return fn


def test_a_number_is_the_reward_with_no_components():
    assert score(constant(0.5), prompt="", response="", ground_truth=None) == (0.5, {})
    assert score(constant(True), prompt="", response="", ground_truth=None) == (1.0, {})


def test_a_dict_without_reward_key_sums_its_components():
    reward, components = score(
        constant({"accuracy": 1, "format": 0.25}), prompt="", response="", ground_truth=None
    )
    assert reward == 1.25
    assert components == {"accuracy": 1.0, "format": 0.25}


def test_a_reward_key_is_the_total_and_the_rest_are_metrics():
    reward, components = score(
        constant({"reward": 0.1, "accuracy": 0.0, "format": 1.0}), prompt="", response="", ground_truth=None
    )
    assert reward == 0.1
    assert components == {"accuracy": 0.0, "format": 1.0}


@pytest.mark.parametrize("bad", ["1.0", None, [1.0], {"a": "x"}])
def test_non_numbers_are_rejected_with_the_function_name(bad):
    with pytest.raises(TypeError, match="fn"):
        score(constant(bad), prompt="", response="", ground_truth=None)


def test_non_finite_rewards_are_rejected():
    with pytest.raises(ValueError, match="finite"):
        score(constant(math.nan), prompt="", response="", ground_truth=None)


def test_kwargs_reach_the_reward_function():
    seen = {}

    def fn(*, prompt, response, ground_truth, **kwargs):
        seen.update(kwargs)
        return 0.0

    score(fn, prompt="p", response="r", ground_truth="g", scale=3)
    assert seen == {"scale": 3}


def test_registry_knows_builtins_and_dotted_paths():
    assert {"math_reward", "accuracy_reward", "format_reward", "countdown_reward"} <= set(REWARD_FNS.names())
    fn = resolve_reward_fn("trivium.rewards.math_rewards:format_reward")
    assert fn is REWARD_FNS.get("format_reward")
    with pytest.raises(RegistryError, match="math_reward"):
        REWARD_FNS.get("math_rewad")
