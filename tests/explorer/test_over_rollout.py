"""Over-rollout and dynamic timeouts: a step does not wait for its slowest tasks."""

import threading
import time

import pytest
import torch

from trivium.core.experience import Experience
from trivium.core.task import Task
from trivium.explorer.dynamic_timeout import DynamicTimeout
from trivium.explorer.explorer import Explorer
from trivium.explorer.over_rollout import OverRollout
from trivium.explorer.runner import RunnerPool

SLOW_SECONDS = 5.0


class SleepsOnSlowTasks:
    """One sample per repeat; a task whose id starts with "slow" sleeps first (in Python, so it can be stopped)."""

    can_repeat = True
    stopped = threading.Event()

    def __init__(self, task):
        self.task = task

    def run(self):
        if self.task.task_id.startswith("slow"):
            try:
                deadline = time.monotonic() + SLOW_SECONDS
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            except BaseException:
                SleepsOnSlowTasks.stopped.set()
                raise
        return [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=1.0)
                for _ in range(self.task.repeat_times)]


class Tasks:
    def __init__(self, tasks):
        self.tasks = tasks

    def read(self, batch_size):
        tasks, self.tasks = self.tasks[:batch_size], self.tasks[batch_size:]
        return tasks


class Writer:
    def __init__(self):
        self.written = []

    def write(self, experiences):
        self.written.extend(experiences)


def _explorer(tasks, over_rollout, *, max_repeat=None, max_timeout=60.0):
    pool = RunnerPool(make_workflow=lambda task, runner: SleepsOnSlowTasks(task), num_runners=8, max_timeout=max_timeout)
    writer = Writer()
    explorer = Explorer(taskset_reader=Tasks(tasks), writer=writer, runner_pool=pool, batch_size=len(tasks),
                        over_rollout=over_rollout, max_repeat_times_per_runner=max_repeat)
    return explorer, writer


def test_min_tasks_is_the_ceiling_of_one_minus_ratio():
    assert OverRollout(ratio=0.25).min_tasks(4) == 3
    assert OverRollout(ratio=0.3).min_tasks(4) == 3  # ceil(2.8)
    assert OverRollout(ratio=0.9).min_tasks(4) == 1
    assert OverRollout(ratio=0.0).min_tasks(4) == 4


def test_a_step_goes_on_without_its_late_task_and_drops_it():
    SleepsOnSlowTasks.stopped.clear()
    tasks = [Task(raw={}, task_id=f"fast{i}", repeat_times=2) for i in range(3)] + [
        Task(raw={}, task_id="slow0", repeat_times=2)
    ]
    explorer, writer = _explorer(tasks, OverRollout(ratio=0.25, wait_after_min=0.2))
    start = time.monotonic()
    metrics = explorer.explore_step()
    elapsed = time.monotonic() - start
    assert elapsed < 2.0  # the slow task sleeps 5 s
    assert metrics["rollout/late_tasks"] == 1 and metrics["rollout/late_tasks_dropped"] == 1
    assert sorted({e.task_id for e in writer.written}) == ["fast0", "fast1", "fast2"]
    assert metrics["rollout/num_experiences"] == 6
    # The abandoned attempt is stopped, not left running.
    assert SleepsOnSlowTasks.stopped.wait(2.0)


def test_the_step_waits_wait_after_min_for_the_rest():
    tasks = [Task(raw={}, task_id="fast0"), Task(raw={}, task_id="slow0")]
    explorer, _ = _explorer(tasks, OverRollout(ratio=0.5, wait_after_min=0.6))
    start = time.monotonic()
    metrics = explorer.explore_step()
    assert 0.55 < time.monotonic() - start < 2.5
    assert metrics["rollout/late_tasks"] == 1


def test_without_over_rollout_the_step_waits_for_every_task():
    global SLOW_SECONDS
    SLOW_SECONDS, before = 0.5, SLOW_SECONDS
    try:
        tasks = [Task(raw={}, task_id="fast0"), Task(raw={}, task_id="slow0")]
        explorer, writer = _explorer(tasks, OverRollout(ratio=0.0))
        start = time.monotonic()
        metrics = explorer.explore_step()
        assert time.monotonic() - start >= 0.5
        assert "rollout/late_tasks" not in metrics and len(writer.written) == 2
    finally:
        SLOW_SECONDS = before


class FirstJobOfMixedIsSlow(SleepsOnSlowTasks):
    """Task "mixed" runs as two jobs; the first job to start sleeps, the other is quick."""

    lock = threading.Lock()
    started = 0

    def run(self):
        if self.task.task_id == "mixed":
            with FirstJobOfMixedIsSlow.lock:
                FirstJobOfMixedIsSlow.started += 1
                first = FirstJobOfMixedIsSlow.started == 1
            if first:
                deadline = time.monotonic() + SLOW_SECONDS
                while time.monotonic() < deadline:
                    time.sleep(0.01)
        return super().run()


@pytest.mark.parametrize("return_partial, kept_from_mixed", [(True, 2), (False, 0)])
def test_return_partial_tasks_keeps_the_finished_jobs_of_a_late_task(return_partial, kept_from_mixed):
    FirstJobOfMixedIsSlow.started = 0
    tasks = [Task(raw={}, task_id="fast0", repeat_times=4), Task(raw={}, task_id="mixed", repeat_times=4)]
    pool = RunnerPool(make_workflow=lambda task, runner: FirstJobOfMixedIsSlow(task), num_runners=8)
    writer = Writer()
    explorer = Explorer(taskset_reader=Tasks(tasks), writer=writer, runner_pool=pool, batch_size=2,
                        max_repeat_times_per_runner=2,
                        over_rollout=OverRollout(ratio=0.5, wait_after_min=0.3, return_partial_tasks=return_partial))
    start = time.monotonic()
    metrics = explorer.explore_step()
    assert time.monotonic() - start < 2.0
    assert len([e for e in writer.written if e.task_id == "mixed"]) == kept_from_mixed
    assert metrics["rollout/late_tasks"] == 1
    assert metrics["rollout/late_tasks_partial"] == (1 if return_partial else 0)
    assert metrics["rollout/late_tasks_dropped"] == (0 if return_partial else 1)
    assert metrics["rollout/num_experiences"] == 4 + kept_from_mixed


def test_dynamic_timeout_is_mean_success_time_times_ratio_capped():
    timeout = DynamicTimeout(ratio=3.0, max_timeout=10.0)
    assert timeout.current() == 10.0  # no success yet
    timeout.record_success(1.0)
    timeout.record_success(2.0)
    assert timeout.current() == pytest.approx(4.5)  # mean 1.5 * 3
    timeout.record_success(30.0)
    assert timeout.current() == 10.0  # mean 11 * 3 capped by max_timeout


def test_dynamic_timeout_stops_a_task_far_slower_than_the_others():
    tasks = [Task(raw={}, task_id=f"fast{i}") for i in range(4)]
    pool = RunnerPool(make_workflow=lambda task, runner: SleepsOnSlowTasks(task), num_runners=4, max_timeout=60.0,
                      max_retry_times=0, dynamic_timeout=DynamicTimeout(ratio=3.0, max_timeout=60.0))
    explorer = Explorer(taskset_reader=Tasks(tasks + [Task(raw={}, task_id="slow0")]), writer=Writer(),
                        runner_pool=pool, batch_size=4)
    first = explorer.explore_step()  # fast tasks teach the pool how long a task takes
    assert first["rollout/dynamic_timeout"] == 60.0
    start = time.monotonic()
    second = explorer.explore_step()  # the slow task alone: stopped after about 3 x the mean
    assert time.monotonic() - start < 2.0
    assert second["rollout/timeouts"] == 1 and second["rollout/failed_tasks"] == 1
    assert second["rollout/dynamic_timeout"] < 1.0
