import json
from collections import Counter

import pytest

from trivium.buffer import BufferExhausted
from trivium.buffer.selectors import DifficultySelector, ShuffleSelector
from trivium.buffer.task_reader import MultiTasksetReader, TaskReader
from trivium.buffer.task_source import store_task_rows
from trivium.errors import UserError

from .conftest import storage


def write_taskset(directory, rows, name="train.jsonl"):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / name, "w") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")
    return directory


def taskset(tmp_path, count=5, name="math", **fields):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(count)]
    path = write_taskset(tmp_path / name, rows)
    fields.setdefault("format", {"prompt_key": "question", "response_key": "answer"})
    return storage(name, storage_type="file", path=str(path), **fields)


def indices(tasks):
    return [t.index for t in tasks]


def test_tasks_carry_config_and_stable_ids(tmp_path):
    config = taskset(tmp_path, repeat_times=4, default_workflow_type="math_workflow",
                     default_reward_fn_type="math_reward", rollout_args={"temperature": 0.7},
                     reward_fn_args={"scale": 2})
    task = TaskReader(config).read(1)[0]
    assert task.raw == {"question": "q0", "answer": "0"}
    assert (task.workflow, task.reward_fn, task.repeat_times) == ("math_workflow", "math_reward", 4)
    assert task.rollout_args == {"temperature": 0.7}
    assert task.workflow_args["reward_fn_args"] == {"scale": 2}
    assert task.prompt == "q0" and task.ground_truth == "0"
    assert task.task_id == "math:0:0:0" and task.taskset_name == "math"


def test_sequential_epochs_end_with_a_short_batch(tmp_path):
    reader = TaskReader(taskset(tmp_path, count=5), total_epochs=2)
    assert indices(reader.read(3)) == [0, 1, 2]
    batch = reader.read(3)  # crosses into epoch 1
    assert indices(batch) == [3, 4, 0]
    assert [t.task_id for t in batch][-1] == "math:0:1:0"
    assert indices(reader.read(3)) == [1, 2, 3]
    assert indices(reader.read(3)) == [4]
    with pytest.raises(BufferExhausted):
        reader.read(3)


def test_total_steps_overrides_epochs(tmp_path):
    reader = TaskReader(taskset(tmp_path, count=2), total_epochs=1, total_steps=3)
    assert [len(reader.read(2)) for _ in range(3)] == [2, 2, 2]
    with pytest.raises(BufferExhausted):
        reader.read(2)


def test_shuffle_is_a_seeded_permutation_per_epoch(tmp_path):
    config = taskset(tmp_path, count=6, task_selector={"selector_type": "shuffle", "seed": 3})
    reader = TaskReader(config, total_epochs=2)
    first, second = indices(reader.read(6)), indices(reader.read(6))
    assert sorted(first) == sorted(second) == list(range(6))
    assert first != second  # reshuffled
    assert first == indices(TaskReader(config).read(6))  # same seed, same order
    assert first != list(range(6))


def test_random_draws_with_replacement_and_is_seeded(tmp_path):
    config = taskset(tmp_path, count=3, task_selector={"selector_type": "random", "seed": 1})
    draws = indices(TaskReader(config, total_steps=10).read(30))
    assert draws == indices(TaskReader(config, total_steps=10).read(30))
    assert set(draws) == {0, 1, 2}
    assert draws != indices(TaskReader(taskset(tmp_path, count=3, name="seed2",
        task_selector={"selector_type": "random", "seed": 2}), total_steps=10).read(30))


def test_difficulty_prefers_pass_rates_near_target():
    selector = DifficultySelector(4, seed=0, target=0.5, temperature=0.1)
    for index, rate in enumerate([0.0, 0.5, 1.0, 0.9]):
        selector.update(index, rate)
    # weights exp(-|p - 0.5| / 0.1): e^-5, 1, e^-5, e^-4
    weights = selector.weights()
    assert weights[1] / weights[3] == pytest.approx(2.718281828**4)
    assert weights[0] == pytest.approx(weights[2])
    counts = Counter(selector.select(0, 1)[0] for _ in range(300))
    assert counts[1] > 250


def test_difficulty_feedback_through_reader_and_state_roundtrip(tmp_path):
    config = taskset(tmp_path, count=4, task_selector={"selector_type": "difficulty", "seed": 2})
    reader = TaskReader(config, total_steps=100)
    for task in reader.read(4):
        reader.update_pass_rate(task.task_id, 1.0 if task.index != 2 else 0.5)
    state = reader.state_dict()
    assert state["selector"]["pass_rates"] == {"0": 1.0, "1": 1.0, "2": 0.5, "3": 1.0}
    clone = TaskReader(config, total_steps=100)
    clone.load_state_dict(json.loads(json.dumps(state)))
    assert indices(clone.read(5)) == indices(reader.read(5))


def test_saved_position_resumes_where_it_stopped(tmp_path):
    config = taskset(tmp_path, count=7, task_selector={"selector_type": "shuffle", "seed": 5})
    reader = TaskReader(config, total_epochs=3)
    reader.read(4)
    reader.read(4)
    reader.save_position(tmp_path / "run" / "taskset_position.json")
    expected = indices(reader.read(4))
    resumed = TaskReader(config, total_epochs=3)
    assert resumed.load_position(tmp_path / "run" / "taskset_position.json")
    assert indices(resumed.read(4)) == expected
    assert not resumed.load_position(tmp_path / "missing.json")


def test_rows_without_prompt_are_skipped_and_counted_or_rejected(tmp_path):
    rows = [{"question": "q0"}, {"answer": "1"}, {"question": "q2"}, {"question": None}]
    path = write_taskset(tmp_path / "bad", rows)
    config = storage("bad", storage_type="file", path=str(path), format={"prompt_key": "question"})
    reader = TaskReader(config)
    assert reader.skipped_rows == 2
    assert indices(reader.read(10)) == [0, 2]
    with pytest.raises(UserError, match=r"train.jsonl line 2: missing .question."):
        TaskReader(config, strict=True)


def test_eval_reader_walks_once_in_file_order(tmp_path):
    config = taskset(tmp_path, count=3, task_selector={"selector_type": "shuffle"})
    reader = TaskReader(config, is_eval=True, total_epochs=1, total_steps=100)
    tasks = reader.read(10)
    assert indices(tasks) == [0, 1, 2] and all(t.is_eval for t in tasks)
    with pytest.raises(BufferExhausted):
        reader.read(10)


def test_sql_tasks_table(tmp_path):
    path = str(tmp_path / "tasks.db")
    store_task_rows(path, "sqltasks", [{"question": "a"}, {"question": "b"}])
    config = storage("sqltasks", storage_type="sql", path=path, format={"prompt_key": "question"})
    assert [t.prompt for t in TaskReader(config).read(5)] == ["a", "b"]


def test_bad_paths_and_keys_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        TaskReader(storage("x", storage_type="file", path=str(tmp_path / "nope")))
    config = taskset(tmp_path, format={"prompt_key": "prompt"})
    with pytest.raises(UserError, match="column 'prompt'"):
        TaskReader(config, strict=True)
    with pytest.raises(UserError, match="selector_type"):
        TaskReader(taskset(tmp_path, name="other", task_selector={"selector_type": "hardest"}))


def test_multi_taskset_mixes_by_size(tmp_path):
    big = TaskReader(taskset(tmp_path, count=6, name="big"))
    small = TaskReader(taskset(tmp_path, count=2, name="small"))
    reader = MultiTasksetReader([big, small])
    batch = reader.read(4)
    assert Counter(t.taskset_name for t in batch) == {"big": 3, "small": 1}
    assert Counter(t.taskset_name for t in reader.read(4)) == {"big": 3, "small": 1}
    with pytest.raises(BufferExhausted):
        reader.read(4)


def test_shuffle_selector_visits_every_row_each_epoch():
    selector = ShuffleSelector(5, seed=9)
    draws = selector.select(0, 15)
    for epoch in range(3):
        assert sorted(draws[5 * epoch : 5 * epoch + 5]) == list(range(5))
