from types import SimpleNamespace

from trivium.runtime.launcher import eval_change_lines
from trivium.runtime.explorer_settings import expected_explore_steps


def test_eval_change_reports_points_gained():
    lines = eval_change_lines([(0, {"eval/add/accuracy": 0.4}), (100, {"eval/add/accuracy": 0.865})])
    assert lines == ["held-out accuracy on add: 40.0% at step 0 -> 86.5% at step 100 (+46.5 points)"]
    assert eval_change_lines([(0, {"eval/add/accuracy": 0.4})]) == []


def test_expected_explore_steps_from_trainer_steps():
    config = SimpleNamespace(
        buffer=SimpleNamespace(total_steps=None, batch_size=8, train_batch_size=16),
        trainer=SimpleNamespace(total_steps=10),
        algorithm=SimpleNamespace(repeat_times=4),
    )
    # 10 trainer steps x 16 experiences / (8 tasks x 4 repeats per explorer step) = 5
    assert expected_explore_steps(config) == 5
