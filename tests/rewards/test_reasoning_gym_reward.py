"""The reasoning_gym reward: real generated rows scored by their dataset's own score_answer."""

import json

import pytest

from trivium.data.reasoning_gym_tasks import generate_reasoning_gym
from trivium.errors import UserError
from trivium.rewards.reasoning_gym_reward import reasoning_gym_reward
from trivium.rewards.registry import REWARD_FNS, score
from trivium.workflows.registry import WORKFLOWS


def first_row(name, **config):
    return generate_reasoning_gym(name, 1, 0, config)[0]


def reward_for(row, reply):
    return reasoning_gym_reward(prompt=row["prompt"], response=reply, ground_truth=row["response"])


def test_gcd_correct_answer_scores_one_and_wrong_zero():
    row = first_row("gcd")
    # Seed 0's first item, checked by hand: gcd(777, 912) = 3 (912 - 777 = 135, 777 = 5 * 135 + 102,
    # 135 - 102 = 33, 102 = 3 * 33 + 3, 33 = 11 * 3).
    assert "777, 912" in row["prompt"] and row["reference_answer"] == "3"
    assert reward_for(row, "The factors... <answer>3</answer>") == {
        "reward": 1.0,
        "accuracy": 1.0,
        "format": 1.0,
    }
    assert reward_for(row, "<answer>4</answer>") == {"reward": 0.0, "accuracy": 0.0, "format": 1.0}
    # No answer block: the verifier sees no answer, even though the text says 3.
    assert reward_for(row, "it is 3") == {"reward": 0.0, "accuracy": 0.0, "format": 0.0}
    # The last block counts, as in reasoning-gym's own extraction.
    assert reward_for(row, "<answer>4</answer> no: <answer> 3 </answer>")["reward"] == 1.0


def test_syllogism_yes_no_answers():
    row = first_row("syllogism")
    assert "Does it logically follow" in row["prompt"] and row["reference_answer"] == "Yes"
    assert reward_for(row, "<answer>Yes</answer>")["reward"] == 1.0
    assert reward_for(row, "<answer>No</answer>")["reward"] == 0.0


def test_partial_credit_is_the_datasets_own():
    row = first_row("basic_arithmetic", max_terms=2, max_digits=1, operators=["+"], allow_parentheses=False)
    assert row["prompt"] == "Calculate 0 + 4." and row["reference_answer"] == "4"
    assert reward_for(row, "<answer>4</answer>")["reward"] == 1.0
    # basic_arithmetic keeps the base verifier: an answer containing the oracle earns
    # len(oracle) / len(answer): "14" -> 1/2, "4.0" -> 1/3; neither counts as accurate.
    assert reward_for(row, "<answer>14</answer>") == {"reward": 0.5, "accuracy": 0.0, "format": 1.0}
    assert reward_for(row, "<answer>4.0</answer>")["reward"] == pytest.approx(1 / 3)
    assert reward_for(row, "<answer>5</answer>")["reward"] == 0.0


def test_registered_name_scores_through_the_reward_rule():
    row = first_row("gcd")
    reward, components = score(
        REWARD_FNS.get("reasoning_gym"),
        prompt=row["prompt"],
        response="<answer>3</answer>",
        ground_truth=row["response"],
    )
    assert reward == 1.0 and components == {"accuracy": 1.0, "format": 1.0}
    # The ground truth may also arrive already parsed.
    parsed = json.loads(row["response"])
    assert (
        reasoning_gym_reward(prompt="", response="<answer>3</answer>", ground_truth=parsed)["reward"] == 1.0
    )
    assert WORKFLOWS.get("reasoning_gym").default_reward_fn == "reasoning_gym"


def test_ground_truth_without_an_entry_is_a_user_error():
    with pytest.raises(UserError, match="ground truth must be JSON with 'dataset', 'config' and 'entry'"):
        reasoning_gym_reward(prompt="", response="<answer>3</answer>", ground_truth="3")
    row = first_row("gcd")
    unknown = json.dumps({**json.loads(row["response"]), "dataset": "gdc"})
    with pytest.raises(UserError, match="no dataset 'gdc'.*Did you mean: gcd"):
        reasoning_gym_reward(prompt="", response="<answer>3</answer>", ground_truth=unknown)


def test_reward_fn_args_are_refused_not_ignored():
    row = first_row("gcd")
    with pytest.raises(UserError, match="takes no reward_fn_args, got: strict"):
        reasoning_gym_reward(
            prompt="", response="<answer>3</answer>", ground_truth=row["response"], strict=True
        )
