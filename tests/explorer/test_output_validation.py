"""Workflow output checked at the door: bad experiences dropped and counted, empty output a failure,
and a run in which every task keeps failing stopped with a reason."""

import logging

import numpy as np
import pytest
import torch

from trivium.buffer.base import BufferExhausted
from trivium.core.experience import Experience
from trivium.core.task import Task
from trivium.explorer.explorer import Explorer
from trivium.explorer.runner import RunnerPool, split_units
from trivium.explorer.stall import ExplorationStalled


def good(reward=1.0, **fields):
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=reward, **fields)


class Returns:
    """A workflow returning a fixed list (a fresh copy per run)."""

    can_repeat = True

    def __init__(self, make):
        self.make = make

    def run(self):
        return self.make()


def pool_of(make, **kwargs):
    return RunnerPool(make_workflow=lambda task, runner: Returns(make), num_runners=1, max_retry_times=1, **kwargs)


def run_one(pool):
    return pool.run(split_units([Task(raw={}, task_id="t0")], None))[0]


def test_bad_experiences_are_dropped_with_a_logged_reason_and_siblings_kept(caplog):
    pool = pool_of(lambda: [good(), good(info={"n": np.int64(1)}), good(metrics={"acc": "yes"}),
                            good(reward=1e308), Experience(tokens=torch.tensor([1, 2, 99]), prompt_length=2, reward=0.0)],
                   vocab_size=50)
    with caplog.at_level(logging.WARNING):
        result = run_one(pool)
    assert result.ok and len(result.experiences) == 1
    assert result.dropped == [
        "experience 1: info cannot be stored as JSON: a numpy.int64 value (1) is not a JSON type; "
        "convert it with float(), int() or str()",
        "experience 2: metric 'acc' must be a Python int or float, got str 'yes'",
        "experience 3: reward 1e+308 is beyond ±1e+06; check the reward function",
        "experience 4: token id 99 is outside the vocabulary (size 50)",
    ]
    assert "task t0: dropped experience 4: token id 99" in caplog.text


def test_an_empty_list_is_a_failure_not_a_success():
    result = run_one(pool_of(lambda: []))
    assert not result.ok and result.attempts == 2
    assert result.error == "InvalidWorkflowOutput: the workflow returned no experiences (an empty list)"


def test_all_nan_rewards_fail_the_attempt():
    result = run_one(pool_of(lambda: [good(reward=float("nan")), good(reward=float("nan"))]))
    assert not result.ok
    assert result.error == "InvalidWorkflowOutput: every experience is unusable; experience 0: reward is nan"


class ListWriter:
    def __init__(self):
        self.written = []

    def write(self, experiences):
        self.written.extend(experiences)


class Tasks:
    def __init__(self, steps):
        self.steps = steps

    def read(self, batch_size):
        if self.steps == 0:
            raise BufferExhausted("done")
        self.steps -= 1
        return [Task(raw={}, task_id=f"t{self.steps}:{i}") for i in range(batch_size)]


def explorer_with(make, *, steps, max_failed_steps):
    writer = ListWriter()
    explorer = Explorer(taskset_reader=Tasks(steps), writer=writer, runner_pool=pool_of(make), batch_size=2,
                        max_failed_steps=max_failed_steps)
    return explorer, writer


def test_every_task_failing_for_n_steps_stops_the_run_with_the_reason():
    def broken():
        raise ValueError("reward server is down")

    explorer, _ = explorer_with(broken, steps=10, max_failed_steps=3)
    assert explorer.explore_step()["rollout/failed_tasks"] == 2.0
    explorer.explore_step()
    with pytest.raises(ExplorationStalled) as stalled:
        explorer.explore_step()
    message = str(stalled.value)
    assert "every task of the last 3 explore steps (steps 1-3, 2 tasks in the last) failed" in message
    assert "ValueError: reward server is down" in message and "explorer.max_failed_steps" in message


def test_nan_rewards_on_every_task_also_stall_the_run():
    explorer, writer = explorer_with(lambda: [good(reward=float("nan"))], steps=10, max_failed_steps=2)
    explorer.explore_step()
    with pytest.raises(ExplorationStalled, match="reward is nan"):
        explorer.explore_step()
    assert writer.written == []


def test_a_step_with_any_usable_experience_resets_the_count():
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] % 6 == 0:  # one good attempt every third step (2 tasks x 2 attempts = 4 per failed step)
            return [good()]
        raise RuntimeError("flaky")

    explorer, writer = explorer_with(flaky, steps=6, max_failed_steps=3)
    while explorer.explore_step() is not None:
        pass
    assert explorer.state.finished and writer.written


def test_none_never_stops():
    explorer, _ = explorer_with(lambda: [], steps=4, max_failed_steps=None)
    while explorer.explore_step() is not None:
        pass
    assert explorer.state.failed_tasks == 8
