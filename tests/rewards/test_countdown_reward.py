import json

import pytest

from trivium.errors import UserError
from trivium.rewards.countdown import (
    EquationError,
    countdown_reward,
    evaluate_equation,
    extract_equation,
    parse_countdown_ground_truth,
)

TRUTH = {"target": 16, "numbers": [3, 5, 2]}


def reward_of(response, ground_truth=TRUTH):
    return countdown_reward(prompt="", response=response, ground_truth=ground_truth)["reward"]


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<answer>(3 + 5) * 2</answer>", 1.0),
        ("<answer>2 * (5 + 3)</answer>", 1.0),
        ("<answer>(3 + 5) * 2 = 16</answer>", 1.0),  # trailing '= target' is allowed
        ("\\boxed{(3 + 5) * 2}", 1.0),
        ("<answer>(3 × 5) + 2 / 2 - 0</answer>", 0.1),  # 0 is not given; 2 used twice
        ("<answer>3 * 5 + 2</answer>", 0.1),  # uses the numbers but gives 17
        ("<answer>8 * 2</answer>", 0.1),  # hits 16 with a number that is not given
        ("<answer>(3 + 5) * 2 * 2 / 2</answer>", 0.1),  # 2 used more often than given
        ("<answer>5 / (3 - 3)</answer>", 0.1),  # division by zero: well-formed, wrong
        ("<answer>-3 + 19</answer>", 0.0),  # unary minus is not allowed
        ("<answer>2 ** 4</answer>", 0.0),  # no powers
        ("<answer>__import__('os')</answer>", 0.0),  # names and calls never run
        ("<answer>16.0</answer>", 0.0),  # float literal
        ("<answer>(3 + 5</answer>", 0.0),
        ("(3 + 5) * 2", 0.0),  # no answer tag
        ("", 0.0),
        (None, 0.0),
        ("<answer>" + "1+" * 150 + "1</answer>", 0.0),  # too long
    ],
)
def test_countdown_reward_cases(response, expected):
    assert reward_of(response) == pytest.approx(expected)


def test_countdown_reward_components():
    assert countdown_reward(prompt="", response="<answer>(3+5)*2</answer>", ground_truth=TRUTH) == {
        "reward": 1.0,
        "accuracy": 1.0,
        "format": 1.0,
    }
    assert countdown_reward(prompt="", response="<answer>3+5</answer>", ground_truth=TRUTH) == {
        "reward": 0.1,
        "accuracy": 0.0,
        "format": 1.0,
    }


def test_division_is_exact_not_floating_point():
    # 1 / 3 * 3 is exactly 1 with fractions (floating point would give 0.999...).
    truth = {"target": 1, "numbers": [1, 3, 3]}
    assert reward_of("<answer>1 / 3 * 3</answer>", truth) == 1.0


def test_duplicated_given_numbers_may_each_be_used():
    truth = {"target": 10, "numbers": [5, 5]}
    assert reward_of("<answer>5 + 5</answer>", truth) == 1.0
    assert reward_of("<answer>5 + 5 + 5 - 5</answer>", truth) == 0.1


def test_ground_truth_forms():
    expected = parse_countdown_ground_truth(TRUTH)
    assert parse_countdown_ground_truth(json.dumps(TRUTH)) == expected
    assert parse_countdown_ground_truth({"target": "16", "nums": ["3", "5", "2"]}) == expected
    assert expected.target == 16 and expected.numbers == (3, 5, 2)


@pytest.mark.parametrize("bad", ["not json", '{"target": 3}', [1, 2], {"target": "x", "numbers": [1]}])
def test_bad_ground_truth_is_a_user_error(bad):
    with pytest.raises(UserError, match="countdown"):
        parse_countdown_ground_truth(bad)


def test_evaluate_equation_returns_value_and_literals():
    value, used = evaluate_equation("(10 - 4) / 4 + 7")
    assert value == pytest.approx(8.5)
    assert used == [10, 4, 4, 7]
    with pytest.raises(EquationError):
        evaluate_equation("x + 1")
    with pytest.raises(EquationError):
        evaluate_equation("True + 1")


def test_extract_equation_normalizes_symbols():
    assert extract_equation("<answer>3 × 4 ÷ 2 = 6</answer>") == "3 * 4 / 2"
    assert extract_equation("no tags") is None
