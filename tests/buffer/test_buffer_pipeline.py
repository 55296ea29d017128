import math

import pytest

from trivium.buffer.pipeline import ExperiencePipeline, TaskPipeline
from trivium.buffer.task_reader import TaskReader
from trivium.config.schema import OperatorConfig
from trivium.errors import UserError

from .conftest import experience
from .test_buffer_task_reader import taskset


def pipeline(*specs):
    return ExperiencePipeline.from_configs([OperatorConfig(name=name, args=args) for name, args in specs])


def rewards(experiences):
    return [e.reward for e in experiences]


def test_invalid_reward_filter():
    batch = [experience(i, reward=r) for i, r in enumerate([1.0, None, math.nan, math.inf, 0.0])]
    kept, metrics = pipeline(("invalid_reward_filter", {})).process(batch)
    assert rewards(kept) == [1.0, 0.0]
    assert metrics["invalid_reward_filter/dropped"] == 3.0


def test_reward_filter_range_and_threshold():
    batch = [experience(i, reward=r) for i, r in enumerate([-1.0, 0.0, 0.5, 1.0, 2.0])]
    kept, _ = pipeline(("reward_filter", {"min_reward": 0.0, "max_reward": 1.0})).process(batch)
    assert rewards(kept) == [0.0, 0.5, 1.0]
    kept, _ = pipeline(("reward_filter", {"threshold": 0.5})).process(batch)
    assert rewards(kept) == [0.5, 1.0, 2.0]


def test_reward_std_filter_drops_constant_groups():
    batch = [experience(0, reward=1.0, group_id="a"), experience(1, reward=1.0, group_id="a"),
             experience(2, reward=0.0, group_id="b"), experience(3, reward=1.0, group_id="b"),
             experience(4, reward=0.3, group_id="c")]
    kept, metrics = pipeline(("reward_std_filter", {})).process(batch)
    assert [e.group_id for e in kept] == ["b", "b"]
    assert metrics["reward_std_filter/dropped_groups"] == 2.0


def test_reward_shaping_applies_rules_in_order():
    exp = experience(0, reward=1.0)
    exp.info["quality"] = 0.5
    exp.metrics["length_penalty"] = 2.0
    missing = experience(1, reward=1.0)
    rules = [{"stats_key": "quality", "op_type": "ADD", "weight": 2.0},      # 1 + 2*0.5 = 2
             {"stats_key": "length_penalty", "op_type": "SUB", "weight": 0.25},  # 2 - 0.5 = 1.5
             {"stats_key": "quality", "op_type": "MUL", "weight": 4.0},       # 1.5 * 2 = 3
             {"stats_key": "length_penalty", "op_type": "DIV", "weight": 1.0}]  # 3 / 2 = 1.5
    kept, metrics = pipeline(("reward_shaping_mapper", {"reward_shaping_configs": rules})).process([exp, missing])
    assert kept[0].reward == pytest.approx(1.5)
    assert kept[1].reward == 1.0 and metrics["reward_shaping_mapper/missing_stats"] == 4.0


def test_pass_rate_feeds_the_difficulty_selector(tmp_path):
    reader = TaskReader(taskset(tmp_path, count=3, task_selector={"selector_type": "difficulty"}), total_steps=10)
    tasks = reader.read(3)
    batch = []
    for task, outcomes in zip(tasks, [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]):
        for reward in outcomes:
            batch.append(experience(len(batch), reward=reward, group_id=task.task_id))
            batch[-1].task_id = task.task_id
    steps = pipeline(("pass_rate_calculator", {"success_threshold": 1.0}))
    steps.connect_pass_rate(reader.update_pass_rate)
    _, metrics = steps.process(batch)
    assert [e.metrics["pass_rate"] for e in batch] == [1.0, 1.0, 0.5, 0.5, 0.0, 0.0]
    assert metrics["pass_rate_calculator/mean"] == pytest.approx(0.5)
    assert reader.selector.pass_rates == {tasks[0].index: 1.0, tasks[1].index: 0.5, tasks[2].index: 0.0}


def test_unknown_operator_and_bad_args_are_user_errors():
    with pytest.raises(UserError, match="reward_filter"):
        pipeline(("reward_filtr", {}))
    with pytest.raises(UserError, match="bad args"):
        pipeline(("reward_std_filter", {"std": 1}))
    with pytest.raises(UserError, match="op_type"):
        pipeline(("reward_shaping_mapper", {"reward_shaping_configs": [{"stats_key": "a", "op_type": "POW"}]}))


def test_data_juicer_missing_is_explained():
    try:
        import data_juicer  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="pip install py-data-juicer"):
            pipeline(("data_juicer", {"config_path": "recipe.yaml"}))
    else:
        pytest.skip("data_juicer is installed; the missing-package message cannot be shown")


def test_task_pipeline_filters_rows_before_reading(tmp_path):
    rows_pipeline = TaskPipeline.from_configs([
        OperatorConfig(name="length_filter", args={"key": "question", "max_length": 2}),
        OperatorConfig(name="field_filter", args={"key": "answer", "one_of": ["1", "2", "3", "11"]}),
    ])
    reader = TaskReader(taskset(tmp_path, count=12), task_pipeline=rows_pipeline)
    # questions q0..q11: length <= 2 keeps q0..q9; answers in {1, 2, 3} keep rows 1..3.
    assert [t.index for t in reader.read(10)] == [1, 2, 3]


def test_a_run_connects_an_adaptive_selector_to_the_pass_rates(tmp_path):
    from trivium.runtime.builders import connect_selector_feedback

    plain = TaskReader(taskset(tmp_path, count=2, name="plain"), total_steps=10)
    assert connect_selector_feedback(None, plain) is None  # nothing learns: nothing added
    reader = TaskReader(taskset(tmp_path, count=2, task_selector={"selector_type": "difficulty"}), total_steps=10)
    steps = connect_selector_feedback(None, reader)  # no pipeline configured: one with a pass_rate_calculator
    (task, _) = reader.read(2)
    batch = [experience(i, reward=r, group_id=task.task_id) for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    for item in batch:
        item.task_id = task.task_id
    steps.process(batch)
    assert reader.selector.pass_rates == {task.index: 0.25}
