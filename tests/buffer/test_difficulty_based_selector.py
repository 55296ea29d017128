"""difficulty_based (BOTS): a Beta belief per task, updated from feedback and two reference
models' pass rates; checked by hand and through the task reader."""

import json

import numpy as np
import pytest

from trivium.buffer.selectors import TASK_SELECTORS
from trivium.buffer.task_reader import TaskReader
from trivium.errors import UserError

from .conftest import storage
from .test_buffer_task_reader import write_taskset

FEATURES = [[0.0, 1.0], [0.2, 0.6], [0.5, 0.9]]


def selector(**args):
    return TASK_SELECTORS.get("difficulty_based")(3, 0, features=np.array(FEATURES), **args)


def test_belief_update_and_selection_by_hand():
    chosen = selector(m=10, lamb=0.5, rho=0.5)
    assert chosen.select(0, 1) == [0]  # all Beta(1, 1): every mean is 0.5, ties go to the lower index
    chosen.update(0, 0.6)
    assert chosen.select(1, 2) == [1, 0]
    # c = (0.6 - 0) / (1 - 0) = 0.6; priors: task 1 0.2 + 0.4 * 0.6 = 0.44, task 2 0.5 + 0.4 * 0.6 = 0.74
    # alpha_0 = 0.5 + 0.5 + 0.5 * 6 + 0.5 * 10 * 0.6 = 7, beta_0 = 0.5 + 0.5 + 0.5 * 4 + 0.5 * 10 * 0.4 = 5
    # alpha_1 = 1 + 5 * 0.44 = 3.2, beta_1 = 1 + 5 * 0.56 = 3.8; alpha_2 = 4.7, beta_2 = 2.3
    assert chosen.alphas == pytest.approx([7.0, 3.2, 4.7], abs=1e-5)
    assert chosen.betas == pytest.approx([5.0, 3.8, 2.3], abs=1e-5)
    # means 0.583, 0.457, 0.671: distances to 0.5 are 0.083, 0.043, 0.171 -> order 1, 0, 2
    assert chosen.capability == pytest.approx(0.6, abs=1e-5)


def test_the_capability_estimate_is_smoothed():
    chosen = selector(m=10)
    chosen.update(0, 0.6)
    chosen.select(0, 1)
    chosen.update(1, 0.6)  # c_hat = (0.6 - 0.2) / (0.6 - 0.2) = 1
    chosen.select(1, 1)
    assert chosen.capability == pytest.approx(0.9 * 0.6 + 0.1 * 1.0, abs=1e-5)


def test_softmax_sampling_picks_distinct_tasks_and_prefers_the_closest():
    chosen = selector(m=10, lamb=0.5, rho=0.5, tau=0.01)
    chosen.update(0, 0.6)
    chosen.apply_feedback()
    firsts = [chosen.select(0, 2) for _ in range(200)]
    assert all(len(set(pick)) == 2 for pick in firsts)
    assert sum(pick[0] == 1 for pick in firsts) > 150  # exp(-0.043 / 0.01) vs exp(-0.083 / 0.01): ~55 to 1


def test_bad_arguments_are_user_errors():
    with pytest.raises(UserError, match="two columns"):
        TASK_SELECTORS.get("difficulty_based")(3, 0, features=np.zeros((3, 1)))
    with pytest.raises(UserError, match="rho"):
        selector(rho=2.0)
    with pytest.raises(UserError, match="exceeds"):
        selector().select(0, 4)


def bots_taskset(tmp_path, rows, **selector_fields):
    path = write_taskset(tmp_path / "bots", rows)
    return storage(
        "bots",
        storage_type="file",
        path=str(path),
        format={"prompt_key": "question", "response_key": "answer"},
        task_selector={"selector_type": "difficulty_based", **selector_fields},
    )


def test_reader_reads_the_feature_columns_and_keeps_the_belief_across_a_resume(tmp_path):
    rows = [{"question": f"q{i}", "answer": "1", "weak": w, "strong": s} for i, (w, s) in enumerate(FEATURES)]
    config = bots_taskset(
        tmp_path, rows, feature_keys=["weak", "strong"], args={"m": 10, "lamb": 0.5, "rho": 0.5}
    )
    reader = TaskReader(config, total_steps=100)
    (first,) = reader.read(1)
    assert first.index == 0
    reader.update_pass_rate(first.task_id, 0.6)
    state = json.loads(json.dumps(reader.state_dict()))
    assert [task.index for task in reader.read(2)] == [1, 0]
    clone = TaskReader(config, total_steps=100)
    clone.load_state_dict(state)
    assert [task.index for task in clone.read(2)] == [1, 0]


def test_missing_feature_values_and_stray_feature_keys_are_named(tmp_path):
    rows = [
        {"question": "q0", "answer": "1", "weak": 0.1, "strong": 0.5},
        {"question": "q1", "answer": "1", "weak": 0.2},
    ]
    with pytest.raises(UserError, match="strong"):
        TaskReader(bots_taskset(tmp_path, rows, feature_keys=["weak", "strong"]), total_steps=10)
    with pytest.raises(UserError, match="needs the columns"):
        TaskReader(bots_taskset(tmp_path, rows), total_steps=10)
    config = storage(
        "plain",
        storage_type="file",
        path=str(tmp_path / "bots"),
        format={"prompt_key": "question"},
        task_selector={"selector_type": "sequential", "feature_keys": ["weak"]},
    )
    with pytest.raises(UserError, match="reads no feature columns"):
        TaskReader(config, total_steps=10)
