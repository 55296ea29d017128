"""RULER: a judge scores a group of responses relative to each other.

The verdict parsing and the rewards are checked by hand with scripted replies (the workflow
is under test, not the model); the plumbing against trivium's own engine is checked with the
tiny model as policy and judge.
"""

import pytest

from trivium.core.task import Task
from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper
from trivium.workflows.registry import WORKFLOWS
from trivium.workflows.ruler import judging_reward, parse_ruler_scores, ruler_messages

RIGHT, WRONG = "<answer>4</answer>", "<answer>5</answer>"


def math_task(workflow: str, repeat_times: int, **workflow_args) -> Task:
    return Task(
        raw={"question": "What is 2 + 2?", "answer": "4"},
        workflow=workflow,
        repeat_times=repeat_times,
        workflow_args=workflow_args,
        task_id="t7",
    )


@pytest.mark.parametrize(
    ("text", "count", "expected"),
    [
        ("Candidate 2 is wrong. [0.9, 0.1, 1]", 3, [0.9, 0.1, 1.0]),
        ("first [1, 1] then, on reflection: [0.5, 0.25]", 2, [0.5, 0.25]),  # the last list counts
        ("[1.5, -0.2]", 2, [1.0, 0.0]),  # clipped to [0, 1]
        ("[0.9, 0.1]", 3, None),  # one score per response, or malformed
        ("no list here", 2, None),
        ("[good, bad]", 2, None),  # a literal, never evaluated as code
        ("[__import__('os').getcwd(), 1]", 2, None),
        ("[True, 1]", 2, None),
        ("[nan, 1]", 2, None),
        ("] [", 1, None),
    ],
)
def test_parse_ruler_scores(text, count, expected):
    assert parse_ruler_scores(text, count=count) == expected


def test_judging_reward_by_hand():
    # 1 - (|1 - 1| + |0.5 - 0| + |0 - 0|) / 3 = 1 - 0.5 / 3
    assert judging_reward(scores=[1.0, 0.5, 0.0], targets=[1.0, 0.0, 0.0]) == pytest.approx(5 / 6)
    assert judging_reward(scores=[0.0, 1.0], targets=[1.0, 0.0]) == 0.0
    with pytest.raises(ValueError):
        judging_reward(scores=[1.0], targets=[1.0, 0.0])


def test_ruler_prompt_numbers_every_candidate():
    messages = ruler_messages(question="What is 2 + 2?", responses=["four", "five"])
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "What is 2 + 2?" in user and "Candidate 1:\nfour" in user and "Candidate 2:\nfive" in user
    assert "exactly 2 numbers" in user


def test_math_ruler_rewards_are_the_judges_scores(scripted_model):
    policy, judge = scripted_model([RIGHT, WRONG, RIGHT]), scripted_model(["2 is off. [0.9, 0.1, 1.5]"])
    task = math_task("math_ruler_workflow", 3)
    experiences = WORKFLOWS.get("math_ruler_workflow")(
        task=task, model=policy, auxiliary_models=[judge]
    ).run()
    assert [e.reward for e in experiences] == [0.9, 0.1, 1.0]
    # The ground truth scores the responses as a metric only; the judge never sees it.
    assert [e.metrics["gold_reward"] for e in experiences] == [1.0, 0.0, 1.0]
    assert all(e.metrics["judge_success"] == 1.0 for e in experiences)
    (asked,) = judge.calls
    judged = asked["messages"][1]["content"]
    assert f"Candidate 1:\n{RIGHT}" in judged and f"Candidate 2:\n{WRONG}" in judged
    assert "Reference" not in judged and asked["temperature"] == 0.0 and asked.get("n", 1) == 1
    assert [e.group_id for e in experiences] == ["t7"] * 3 and [e.run_id for e in experiences] == [0, 1, 2]


def test_math_ruler_malformed_verdict_gives_zero_and_is_counted(scripted_model):
    policy, judge = scripted_model([RIGHT, WRONG, RIGHT]), scripted_model(["[0.9, 0.1]"])
    task = math_task("math_ruler", 3, judge_rollout_args={"temperature": 0.7})
    experiences = WORKFLOWS.get("math_ruler")(task=task, model=policy, auxiliary_models=[judge]).run()
    assert [e.reward for e in experiences] == [0.0, 0.0, 0.0]
    assert all(e.metrics["judge_success"] == 0.0 for e in experiences)
    assert experiences[0].info["judge_reply"] == "[0.9, 0.1]" and judge.calls[0]["temperature"] == 0.7


def test_math_ruler_without_a_judge_is_a_user_error(scripted_model):
    with pytest.raises(UserError, match="auxiliary_models has 0"):
        WORKFLOWS.get("math_ruler")(task=math_task("math_ruler", 2), model=scripted_model([RIGHT])).run()


def test_trainable_ruler_with_ground_truth_trains_the_verdicts(scripted_model):
    # Three responses, then three verdicts by the same policy: exact, half-right, malformed.
    policy = scripted_model([RIGHT, WRONG, RIGHT, "[1, 0, 1]", "[0.5, 0.5, 0.5]", "no verdict"])
    task = math_task("math_trainable_ruler_workflow", 3, ground_truth_probability=1.0)
    experiences = WORKFLOWS.get("math_trainable_ruler_workflow")(task=task, model=policy).run()
    responses, verdicts = experiences[:3], experiences[3:]
    assert [e.reward for e in responses] == [1.0, 0.0, 1.0]  # the ground truth's rewards
    # targets [1, 0, 1]: 1 - 0 = 1; 1 - (0.5 + 0.5 + 0.5) / 3 = 0.5; malformed = 0
    assert [e.reward for e in verdicts] == [1.0, 0.5, 0.0]
    assert [e.metrics["judge_success"] for e in verdicts] == [1.0, 1.0, 0.0]
    assert all(e.metrics["judge_success"] == pytest.approx(2 / 3) for e in responses)
    assert [e.group_id for e in verdicts] == ["t7-ruler"] * 3 and [e.run_id for e in verdicts] == [0, 1, 2]
    assert {e.group_id for e in responses} == {"t7"}
    assert policy.calls[1]["n"] == 3 and "Candidate 3" in policy.calls[1]["messages"][1]["content"]


def test_trainable_ruler_without_ground_truth_uses_one_untrained_verdict(scripted_model):
    policy = scripted_model([RIGHT, WRONG, "[0.25, 0.75]"])
    task = math_task("math_trainable_ruler", 2, ground_truth_probability=0.0)
    experiences = WORKFLOWS.get("math_trainable_ruler")(task=task, model=policy).run()
    assert [e.reward for e in experiences] == [0.25, 0.75]
    assert [e.metrics["gold_reward"] for e in experiences] == [1.0, 0.0]
    assert policy.calls[1]["n"] == 1 and all(e.metrics["ground_truth_used"] == 0.0 for e in experiences)


def test_trainable_ruler_probability_is_checked(scripted_model):
    task = math_task("math_trainable_ruler", 2, ground_truth_probability=1.5)
    with pytest.raises(UserError, match="ground_truth_probability"):
        WORKFLOWS.get("math_trainable_ruler")(task=task, model=scripted_model([RIGHT])).run()


@pytest.fixture(scope="module")
def tiny_wrapper(tiny_model_dir):
    return ModelWrapper(
        create_engine("hf", model_path=tiny_model_dir, seed=0), max_response_tokens=6, max_model_len=512
    )


def test_math_ruler_with_trivium_engines_as_policy_and_judge(tiny_wrapper):
    judge = ModelWrapper(tiny_wrapper.engine, max_response_tokens=8, max_model_len=512, enable_history=True)
    task = math_task("math_ruler", 2)
    experiences = WORKFLOWS.get("math_ruler")(task=task, model=tiny_wrapper, auxiliary_models=[judge]).run()
    (verdict,) = judge.extract_experience_from_history()
    assert "Candidate 2:" in verdict.prompt_text
    expected = parse_ruler_scores(verdict.response_text, count=2)
    assert [e.reward for e in experiences] == (expected or [0.0, 0.0])
    assert all(e.metrics["judge_success"] == float(expected is not None) for e in experiences)


def test_trainable_ruler_verdicts_carry_the_policy_tokens_and_logprobs(tiny_wrapper):
    task = math_task("math_trainable_ruler", 2, ground_truth_probability=1.0)
    experiences = WORKFLOWS.get("math_trainable_ruler")(task=task, model=tiny_wrapper).run()
    assert len(experiences) == 4
    for verdict in experiences[2:]:
        response_length = len(verdict.tokens) - verdict.prompt_length
        assert response_length > 0 and len(verdict.logprobs) == response_length
        assert "Candidate 2:" in verdict.prompt_text and verdict.group_id == "t7-ruler"
        assert 0.0 <= verdict.reward <= 1.0
