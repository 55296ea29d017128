import asyncio
import json

import pytest

from trivium.core.task import Task
from trivium.data.prompts import COUNTDOWN_SYSTEM_PROMPT, MATH_SYSTEM_PROMPT
from trivium.errors import UserError
from trivium.workflows import WORKFLOWS, Workflow

ADDITION_ROW = {"question": "What is 47 + 35?", "answer": "82"}
QA_FORMAT = {"prompt_key": "question", "response_key": "answer"}


def make_task(raw, workflow="math", **fields):
    defaults = {
        "format": dict(QA_FORMAT),
        "repeat_times": 4,
        "task_id": "task-7",
        "index": 7,
        "taskset_name": "arith",
    }
    defaults.update(fields)
    return Task(raw=raw, workflow=workflow, **defaults)


def run_workflow(task, model):
    workflow = WORKFLOWS.get(task.workflow)(task=task, model=model)
    return workflow.run()


def test_math_workflow_scores_each_sample_and_fills_grouping(scripted_model):
    model = scripted_model(["<answer>82</answer>", "<answer>81</answer>", "it is 82", "\\boxed{82}"])
    experiences = run_workflow(make_task(ADDITION_ROW, rollout_args={"temperature": 0.7}), model)

    assert [e.reward for e in experiences] == [1.0, 0.0, 1.0, 1.0]
    assert [e.metrics["format"] for e in experiences] == [1.0, 1.0, 0.0, 1.0]
    assert [e.metrics["accuracy"] for e in experiences] == [1.0, 0.0, 1.0, 1.0]
    assert [e.run_id for e in experiences] == [0, 1, 2, 3]
    assert {e.group_id for e in experiences} == {"task-7"}
    assert {e.task_id for e in experiences} == {"task-7"}
    assert experiences[1].info == {
        "task_index": 7,
        "taskset": "arith",
        "ground_truth": "82",
        "extracted_answer": "81",
    }
    # One chat call samples all repeats; the default system prompt asks for the answer format.
    assert len(model.calls) == 1
    call = model.calls[0]
    assert call["n"] == 4 and call["temperature"] == 0.7
    assert call["messages"] == [
        {"role": "system", "content": MATH_SYSTEM_PROMPT},
        {"role": "user", "content": "What is 47 + 35?"},
    ]


def test_math_workflow_reward_fn_and_its_args_come_from_the_task(scripted_model):
    model = scripted_model(["<answer>81</answer>"])
    task = make_task(
        ADDITION_ROW,
        repeat_times=1,
        reward_fn="math_reward",
        workflow_args={"reward_fn_args": {"format_weight": 0.5}},
    )
    [experience] = run_workflow(task, model)
    assert experience.reward == 0.5  # wrong answer, right format, weight 0.5


def test_rollout_n_never_overrides_repeat_times(scripted_model):
    model = scripted_model(["<answer>82</answer>"])
    run_workflow(make_task(ADDITION_ROW, repeat_times=2, rollout_args={"n": 9}), model)
    assert model.calls[0]["n"] == 2


@pytest.mark.parametrize(
    "format_, workflow_args, raw_extra, expected_system",
    [
        ({"system_prompt": "From format."}, {"system_prompt": "From args."}, {}, "From format."),
        ({}, {"system_prompt": "From args."}, {}, "From args."),
        (
            {"system_prompt_key": "sys", "system_prompt": "From format."},
            {},
            {"sys": "From row."},
            "From row.",
        ),
    ],
)
def test_system_prompt_precedence(scripted_model, format_, workflow_args, raw_extra, expected_system):
    model = scripted_model(["<answer>82</answer>"])
    task = make_task(
        {**ADDITION_ROW, **raw_extra},
        format={**QA_FORMAT, **format_},
        workflow_args=workflow_args,
        repeat_times=1,
    )
    run_workflow(task, model)
    assert model.calls[0]["messages"][0] == {"role": "system", "content": expected_system}


def test_simple_workflow_with_messages_prompt_and_named_reward(scripted_model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    task = make_task(
        {"conversation": messages, "label": "Paris"},
        workflow="simple",
        reward_fn="accuracy_reward",
        format={"prompt_type": "messages", "messages_key": "conversation", "response_key": "label"},
        repeat_times=2,
    )
    model = scripted_model(["<answer>paris</answer>", "<answer>Lyon</answer>"])
    experiences = run_workflow(task, model)
    assert model.calls[0]["messages"] == messages
    assert [e.reward for e in experiences] == [1.0, 0.0]
    assert experiences[0].metrics == {}  # a float reward has no components


def test_simple_workflow_without_reward_fn_is_a_user_error(scripted_model):
    with pytest.raises(UserError, match="default_reward_fn_type"):
        WORKFLOWS.get("simple")(task=make_task(ADDITION_ROW, workflow="simple"), model=scripted_model(["x"]))


def test_unknown_workflow_arg_is_named(scripted_model):
    task = make_task(ADDITION_ROW, workflow_args={"system_promt": "typo"})
    with pytest.raises(UserError, match="system_promt"):
        WORKFLOWS.get("math")(task=task, model=scripted_model(["x"]))


def test_missing_prompt_column_names_the_columns(scripted_model):
    task = make_task({"problem": "1+1", "answer": "2"})
    with pytest.raises(UserError, match="problem"):
        run_workflow(task, scripted_model(["x"]))


def test_countdown_workflow_builds_prompt_from_numbers_and_target(scripted_model):
    row = {"numbers": [3, 5, 2], "target": 16, "answer": json.dumps({"target": 16, "numbers": [3, 5, 2]})}
    model = scripted_model(["<answer>(3 + 5) * 2</answer>", "<answer>3 + 5</answer>", "dunno"])
    experiences = run_workflow(make_task(row, workflow="countdown", repeat_times=3, format={}), model)
    assert [e.reward for e in experiences] == [1.0, 0.1, 0.0]
    system, user = model.calls[0]["messages"]
    assert system["content"] == COUNTDOWN_SYSTEM_PROMPT
    assert "[3, 5, 2]" in user["content"] and "16" in user["content"]
    assert experiences[0].info["ground_truth"] == {"target": 16, "numbers": [3, 5, 2]}


def test_countdown_workflow_reads_ground_truth_column_and_renamed_keys(scripted_model):
    model = scripted_model(["<answer>4 * 6</answer>"])
    from_truth = make_task(
        {"gt": {"target": 24, "numbers": [4, 6]}},
        workflow="countdown",
        repeat_times=1,
        format={"response_key": "gt"},
    )
    assert run_workflow(from_truth, model)[0].reward == 1.0
    renamed = make_task(
        {"nums": [4, 6], "goal": 24},
        workflow="countdown",
        repeat_times=1,
        format={},
        workflow_args={"numbers_key": "nums", "target_key": "goal"},
    )
    assert run_workflow(renamed, model)[0].reward == 1.0


def test_math_workflow_with_countdown_reward_on_generated_rows(scripted_model, tmp_path):
    """The pairing a config commonly uses: question/answer columns, countdown scoring."""
    import datasets

    from trivium.data import build_task_data

    build_task_data("countdown", tmp_path, num_train=5, num_test=1, seed=3)
    row = datasets.load_dataset(str(tmp_path), split="train")[0]
    model = scripted_model([row["response"]])
    task = make_task(row, workflow="math_workflow", reward_fn="countdown_reward", repeat_times=1)
    assert run_workflow(task, model)[0].reward == 1.0


def test_run_async_uses_chat_async_when_the_model_has_it(async_scripted_model):
    model = async_scripted_model(["<answer>82</answer>"])
    workflow = WORKFLOWS.get("math")(task=make_task(ADDITION_ROW, repeat_times=2), model=model)
    experiences = asyncio.run(workflow.run_async())
    assert model.async_calls == 1
    assert [e.reward for e in experiences] == [1.0, 1.0]


def test_run_async_falls_back_to_a_thread(scripted_model):
    workflow = WORKFLOWS.get("math")(
        task=make_task(ADDITION_ROW, repeat_times=2), model=scripted_model(["82"])
    )
    assert [e.reward for e in asyncio.run(workflow.run_async())] == [1.0, 1.0]


def test_builtins_repeat_themselves_and_the_base_does_not():
    assert Workflow.can_repeat is False
    for name in ("simple", "math", "countdown"):
        assert WORKFLOWS.get(name).can_repeat is True
        assert WORKFLOWS.get(f"{name}_workflow") is WORKFLOWS.get(name)
