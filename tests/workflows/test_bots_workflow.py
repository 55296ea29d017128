"""bots_ref_eval_collect_math_boxed: a reference model's rewards per task, logged as JSON lines."""

import json

import pytest

from trivium.core.task import Task
from trivium.errors import UserError
from trivium.workflows.bots_workflow import nested_value
from trivium.workflows.registry import WORKFLOWS

MESSAGES = [{"role": "user", "content": "What is 6 * 7? Put it in \\boxed{}."}]


def bots_task(raw, **workflow_args):
    return Task(
        raw=raw,
        workflow="bots_ref_eval_collect_math_boxed_workflow",
        repeat_times=4,
        format={"prompt_key": "prompt", "response_key": "reward_model.ground_truth"},
        workflow_args=workflow_args,
        task_id="b1",
    )


def test_rewards_of_each_task_are_appended_to_the_log(scripted_model, tmp_path):
    model = scripted_model(["\\boxed{42}", "\\boxed{41}", "so \\boxed{42}", "no answer"])
    log = tmp_path / "logs" / "ref.jsonl"
    raw = {"prompt": MESSAGES, "reward_model": {"ground_truth": "42"}}
    workflow = WORKFLOWS.get("bots_ref_eval_collect_math_boxed_workflow")
    experiences = workflow(task=bots_task(raw, log_file=str(log)), model=model).run()
    assert [e.reward for e in experiences] == [1.0, 0.0, 1.0, 0.0]
    assert model.calls[0]["messages"] == MESSAGES  # a ready message list is used as is
    workflow(
        task=bots_task(
            {"prompt": "What is 1 + 1?", "reward_model": {"ground_truth": "2"}}, log_file=str(log)
        ),
        model=scripted_model(["\\boxed{2}"]),
    ).run()
    first, second = [json.loads(line) for line in log.read_text().splitlines()]
    assert first == {"model_version": 3, "rewards": [1.0, 0.0, 1.0, 0.0], "question": MESSAGES, "truth": "42"}
    assert second["rewards"] == [1.0] * 4 and second["question"] == "What is 1 + 1?"


def test_the_log_file_comes_from_the_environment_when_not_given(scripted_model, tmp_path, monkeypatch):
    monkeypatch.setenv("BOTS_REF_EVAL_LOG_FILE", str(tmp_path / "env.jsonl"))
    raw = {"prompt": "What is 1 + 1?", "reward_model": {"ground_truth": "2"}}
    WORKFLOWS.get("bots_ref_eval_collect_math_boxed")(
        task=bots_task(raw), model=scripted_model(["\\boxed{2}"])
    ).run()
    assert json.loads((tmp_path / "env.jsonl").read_text())["truth"] == "2"


def test_nested_keys_and_a_missing_prompt():
    assert nested_value({"a": {"b": {"c": 1}}}, "a.b.c") == 1 and nested_value({"a.b": 2}, "a.b") == 2
    assert nested_value({"a": 1}, "a.b") is None
    with pytest.raises(UserError, match="prompt_key='prompt'"):
        WORKFLOWS.get("bots_ref_eval_collect_math_boxed")(task=bots_task({"question": "q"}), model=None).run()
