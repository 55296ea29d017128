"""The audit trail: a step whose update was skipped is recorded as skipped, not trained."""

from types import SimpleNamespace

from trivium.runtime.trained_samples import record_step, skipped_steps, trained_lineage


def sample(task_id: str, run_id: int = 0):
    return SimpleNamespace(task_id=task_id, run_id=run_id, explore_step=1, model_version=0, is_expert=False)


def test_a_skipped_step_trained_nothing_until_a_later_line_trains_it(tmp_path):
    record_step(tmp_path, 1, [sample("a"), sample("b")])
    record_step(tmp_path, 2, [sample("c")], skipped="non-finite gradients (1 actor update(s) skipped)")
    assert trained_lineage(tmp_path) == {1: [["a", 0, 1, 0], ["b", 0, 1, 0]], 2: []}
    assert skipped_steps(tmp_path) == {2: "non-finite gradients (1 actor update(s) skipped)"}
    record_step(tmp_path, 2, [sample("c")])  # a resumed run trains step 2 again
    assert trained_lineage(tmp_path)[2] == [["c", 0, 1, 0]] and skipped_steps(tmp_path) == {}
