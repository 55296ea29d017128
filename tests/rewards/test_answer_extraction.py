from fractions import Fraction

import pytest

from trivium.errors import UserError
from trivium.rewards.answers import (
    answers_match,
    extract_answer,
    extract_boxed,
    follows_answer_format,
    ground_truth_answer,
    normalize_answer,
    parse_number,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer>82</answer>", "82"),
        ("I think <answer> 82 </answer>", "82"),
        ("<answer>1</answer> no wait <answer>2</answer>", "2"),  # the last tag wins
        ("<ANSWER>7</ANSWER>", "7"),
        ("so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("<answer>\\boxed{5}</answer>", "5"),
        ("47 + 35 = 82", "82"),  # no tag: the last number
        ("the answer is -3.5.", "-3.5"),
        ("nothing numeric here", None),
        ("", None),
        ("<answer>unclosed 12", "12"),  # broken tag falls back to the last number
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_on_non_string_is_none():
    assert extract_answer(None) is None
    assert extract_answer(42) is None


def test_extract_boxed_handles_nesting_and_unclosed_braces():
    assert extract_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert extract_boxed("\\boxed{a{b}c") is None
    assert extract_boxed("no box") is None


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", Fraction(42)),
        ("-3.50", Fraction(-7, 2)),
        ("1,000", Fraction(1000)),
        ("3/4", Fraction(3, 4)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("-\\dfrac{1}{8}", Fraction(-1, 8)),
        ("50%", Fraction(1, 2)),
        ("$12$.", Fraction(12)),
        (".5", Fraction(1, 2)),
        ("1/0", None),
        ("1e999999999", None),  # exponents are refused, never expanded
        ("twelve", None),
        ("1,00", None),  # not a thousands separator
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "predicted, reference, same",
    [
        ("82", "82", True),
        ("82.0", "82", True),
        ("0.5", "1/2", True),
        ("\\frac{1}{2}", "0.5", True),
        ("1,000", "1000", True),
        ("81", "82", False),
        ("Paris", "paris.", True),
        ("Paris", "London", False),
        (None, "1", False),
        ("", "", False),
    ],
)
def test_answers_match(predicted, reference, same):
    assert answers_match(predicted, reference) is same


def test_normalize_answer_keeps_leading_period_of_decimal():
    assert normalize_answer("  $ .5 $ ") == ".5"
    assert normalize_answer("The  Answer.") == "the answer"


@pytest.mark.parametrize(
    "ground_truth, expected",
    [("82", "82"), (82, "82"), ("Janet has... #### 18", "18"), ("so \\boxed{7}", "7"), (None, None)],
)
def test_ground_truth_answer(ground_truth, expected):
    assert ground_truth_answer(ground_truth) == expected


@pytest.mark.parametrize(
    "text, answer_tag, boxed",
    [
        ("<answer>82</answer>", True, False),
        ("thinking... <answer>82</answer>\n", True, False),
        ("<answer>82</answer> trailing words", False, False),
        ("<answer></answer>", False, False),
        ("<answer>1</answer><answer>2</answer>", False, False),
        ("<answer>1", False, False),
        ("\\boxed{82}", False, True),
        ("\\boxed{1} \\boxed{2}", False, False),
        ("\\boxed{}", False, False),
        ("82", False, False),
    ],
)
def test_follows_answer_format(text, answer_tag, boxed):
    assert follows_answer_format(text, "answer_tag") is answer_tag
    assert follows_answer_format(text, "boxed") is boxed
    assert follows_answer_format(text, "any") is (answer_tag or boxed)


def test_unknown_answer_format_is_a_user_error():
    with pytest.raises(UserError, match="answer_format"):
        follows_answer_format("x", "xml")
