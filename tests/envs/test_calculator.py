"""The calculator tool evaluates arithmetic with ast and refuses everything else."""

import pytest

from trivium.envs.calculator import CalculatorError, call_calculator, evaluate, format_value


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("47 * 86", 4042),
        ("12 + 30", 42),
        ("(3 + 5) * 2", 16),
        ("-7 + 2", -5),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("2 ** 10", 1024),
        ("17 % 5", 2),
        (" 1.5 * 4 ", 6.0),
    ],
)
def test_arithmetic_expressions_evaluate_to_hand_computed_values(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os')", "not Call"),
        ("x + 1", "not Name"),
        ("(1).real", "not Attribute"),
        ("'a' * 3", "not Constant"),
        ("2 ** 1000", "exponents above 64"),
        ("1 / 0", "division by zero"),
        ("1 +", "cannot parse"),
        ("", "non-empty"),
        ("1+" * 120 + "1", "longer than 200"),
    ],
)
def test_anything_but_arithmetic_is_refused(expression, reason):
    with pytest.raises(CalculatorError, match=reason):
        evaluate(expression)


def test_a_call_answers_with_the_value_or_an_error_text():
    assert call_calculator("calculator", '{"expression": "47 * 86"}') == ("4042", True)
    assert call_calculator("calculator", {"expression": "9 / 3"}) == ("3", True)  # whole results print whole
    assert call_calculator("search", "{}") == (
        "error: unknown function 'search'; the only function is 'calculator'",
        False,
    )
    assert call_calculator("calculator", "{not json") == ("error: the arguments are not a JSON object", False)
    assert call_calculator("calculator", '{"expr": "1"}') == (
        'error: the arguments must be {"expression": "..."}',
        False,
    )
    assert call_calculator("calculator", '{"expression": "os"}')[1] is False
    assert format_value(2.5) == "2.5" and format_value(4.0) == "4"
