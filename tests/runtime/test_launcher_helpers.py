from types import SimpleNamespace

from trivium.runtime.launcher import eval_change_lines
from trivium.runtime.explorer_settings import expected_explore_steps


def test_eval_change_reports_points_gained():
    lines = eval_change_lines([(0, {"eval/add/accuracy": 0.4}), (100, {"eval/add/accuracy": 0.865})])
    assert lines == ["held-out accuracy on add: 40.0% at step 0 -> 86.5% at step 100 (+46.5 points)"]
    assert eval_change_lines([(0, {"eval/add/accuracy": 0.4})]) == []


def explore_config(mode: str, *, buffer_total_steps=None, trainer_total_steps=10) -> SimpleNamespace:
    # The taskset's size cannot be read (no such path): only buffer.total_steps counts explorer steps.
    taskset = SimpleNamespace(name="t", path="/no/such/taskset", storage_type="file", split="train", subset_name=None)
    return SimpleNamespace(
        mode=mode,
        buffer=SimpleNamespace(total_steps=buffer_total_steps, batch_size=8, train_batch_size=16, total_epochs=1,
                               explorer_input=SimpleNamespace(tasksets=[taskset])),
        trainer=SimpleNamespace(total_steps=trainer_total_steps),
        algorithm=SimpleNamespace(repeat_times=4),
    )


def test_expected_explore_steps_from_trainer_steps():
    # 10 trainer steps x 16 experiences / (8 tasks x 4 repeats per explorer step) = 5
    assert expected_explore_steps(explore_config("both")) == 5


def test_a_run_that_trains_never_explores_more_steps_than_its_trainer_uses():
    assert expected_explore_steps(explore_config("colocate", buffer_total_steps=9)) == 5
    assert expected_explore_steps(explore_config("both", buffer_total_steps=3)) == 3  # the trainer then falls short
    # Explore mode has no trainer: its tasksets' steps count.
    assert expected_explore_steps(explore_config("explore", buffer_total_steps=9, trainer_total_steps=None)) == 9
