"""The reasoning_gym workflow: a generated row, read with the default format, scored by its
dataset's verifier."""

import dataclasses

from trivium.config.schema import FormatConfig
from trivium.core.task import Task
from trivium.data.reasoning_gym_tasks import generate_reasoning_gym, load_reasoning_gym
from trivium.workflows import WORKFLOWS


def test_a_taskset_with_only_the_workflow_set_is_scored_by_score_answer(scripted_model):
    [row] = generate_reasoning_gym("gcd", 1, 0, {})  # gcd(777, 912) = 3
    task = Task(
        raw=row,
        workflow="reasoning_gym",
        # The format a taskset gets when its config has no format section.
        format=dataclasses.asdict(FormatConfig()),
        repeat_times=3,
        task_id="rg-0",
        index=0,
        taskset_name="rg",
    )
    model = scripted_model(["<answer>3</answer>", "<answer>6</answer>", "3"])
    experiences = WORKFLOWS.get("reasoning_gym")(task=task, model=model).run()

    assert [e.reward for e in experiences] == [1.0, 0.0, 0.0]
    assert [e.metrics["format"] for e in experiences] == [1.0, 1.0, 0.0]
    system_prompt = load_reasoning_gym().utils.SYSTEM_PROMPTS["default"]
    assert "<answer>" in system_prompt
    assert model.calls[0]["messages"] == [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": row["prompt"]},
    ]
