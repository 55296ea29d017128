import pytest

from trivium.rewards import REWARD_FNS, score
from trivium.rewards.math_rewards import accuracy_reward, format_reward, math_reward

GARBAGE = [
    "",
    "\x00\x01",
    "<answer>",
    "</answer><answer>",
    "\\boxed{",
    "}" * 50,
    "1/0",
    "💥" * 10,
    "<answer>" * 1000,
]


def call(fn, response, ground_truth="82", **kwargs):
    return fn(prompt="What is 47 + 35?", response=response, ground_truth=ground_truth, **kwargs)


@pytest.mark.parametrize(
    "response, accuracy, well_formatted",
    [
        ("<answer>82</answer>", 1.0, 1.0),
        ("\\boxed{82}", 1.0, 1.0),
        ("47 + 35 = 82", 1.0, 0.0),  # right number, no format
        ("<answer>82.0</answer>", 1.0, 1.0),
        ("<answer>81</answer>", 0.0, 1.0),
        ("<answer>82</answer> and more text", 1.0, 0.0),
        ("no idea", 0.0, 0.0),
    ],
)
def test_math_reward_components(response, accuracy, well_formatted):
    result = call(math_reward, response)
    assert result == {"reward": accuracy, "accuracy": accuracy, "format": well_formatted}


def test_math_reward_format_weight_adds_a_weighted_bonus():
    reward, components = score(
        math_reward, prompt="", response="<answer>81</answer>", ground_truth="82", format_weight=0.2
    )
    assert reward == pytest.approx(0.2)
    assert components == {"accuracy": 0.0, "format": 1.0}
    reward, _ = score(
        math_reward, prompt="", response="<answer>82</answer>", ground_truth="82", format_weight=0.2
    )
    assert reward == pytest.approx(1.2)


def test_math_reward_reads_gsm8k_style_ground_truth():
    assert (
        call(math_reward, "<answer>18</answer>", ground_truth="16 - 3 - 4 = 9 eggs ... #### 18")["accuracy"]
        == 1.0
    )


def test_accuracy_reward_is_string_strict():
    assert call(accuracy_reward, "<answer>82</answer>") == 1.0
    assert call(accuracy_reward, "<answer> 82. </answer>") == 1.0
    assert call(accuracy_reward, "<answer>82.0</answer>") == 0.0  # not the same string
    assert call(accuracy_reward, "<answer>Paris</answer>", ground_truth="paris") == 1.0
    assert call(accuracy_reward, "no answer", ground_truth=None) == 0.0


def test_format_reward_modes():
    assert call(format_reward, "<answer>82</answer>") == 1.0
    assert call(format_reward, "\\boxed{82}") == 0.0
    assert call(format_reward, "\\boxed{82}", answer_format="boxed") == 1.0
    assert call(format_reward, "82") == 0.0


@pytest.mark.parametrize("name", ["math_reward", "accuracy_reward", "format_reward"])
@pytest.mark.parametrize("response", GARBAGE + [None])
def test_rewards_never_raise_on_garbage(name, response):
    reward, _ = score(REWARD_FNS.get(name), prompt="q", response=response, ground_truth="82")
    assert reward == 0.0
