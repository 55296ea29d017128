"""The runner pool: splitting repeats, concurrency modes, retries and timeouts."""

import asyncio
import threading
import time

import pytest
import torch

from trivium.core.experience import Experience
from trivium.core.task import Task
from trivium.errors import UserError
from trivium.explorer.runner import RunnerPool, raise_if_all_misconfigured, split_units


def _experience(reward=1.0):
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=reward)


class OneSample:
    """A workflow that produces one sample per run and records the thread it ran on."""

    can_repeat = False
    threads: set = set()

    def __init__(self, task):
        self.task = task

    def run(self):
        OneSample.threads.add(threading.get_ident())
        time.sleep(0.05)
        return [_experience()]

    async def run_async(self):
        await asyncio.sleep(0.05)
        return [_experience()]


def test_split_units_caps_repeats_per_runner_and_offsets_run_ids():
    units = split_units([Task(raw={}, task_id="t", repeat_times=8)], max_repeat_per_runner=3)
    assert [u.task.repeat_times for u in units] == [3, 3, 2]
    assert [u.run_id_offset for u in units] == [0, 3, 6]


@pytest.mark.parametrize("mode", ["sequential", "multi-threading", "asynchronous"])
def test_every_mode_produces_one_experience_per_repeat(mode):
    pool = RunnerPool(make_workflow=lambda task, runner: OneSample(task), num_runners=2, concurrent_mode=mode)
    start = time.perf_counter()
    results = pool.run(split_units([Task(raw={}, task_id=f"t{i}", repeat_times=4) for i in range(2)], None))
    elapsed = time.perf_counter() - start
    assert [len(r.experiences) for r in results] == [4, 4]
    assert sorted(e.run_id for e in results[0].experiences) == [0, 1, 2, 3]
    assert all(e.group_id == "t0" for e in results[0].experiences)
    # Sequential runs the 4 repeats of a task one after another (>= 0.2 s); the others overlap.
    if mode == "sequential":
        assert elapsed >= 0.2
    else:
        assert elapsed < 0.2


def test_a_hanging_workflow_times_out_is_retried_and_counted():
    calls = []

    class Hangs:
        can_repeat = True

        def __init__(self, task):
            pass

        def run(self):
            calls.append(1)
            time.sleep(5)

    pool = RunnerPool(make_workflow=lambda t, r: Hangs(t), num_runners=1, max_timeout=0.2, max_retry_times=1)
    start = time.perf_counter()
    [result] = pool.run(split_units([Task(raw={}, task_id="slow")], None))
    assert time.perf_counter() - start < 2
    assert not result.ok and result.timeouts == 2 and result.attempts == 2 and len(calls) == 2


def test_a_user_error_is_not_retried_and_stops_a_step_where_every_task_fails():
    class Misconfigured:
        def __init__(self, task):
            raise UserError("workflow_args key 'x' is not understood")

    pool = RunnerPool(make_workflow=lambda t, r: Misconfigured(t), num_runners=1, max_retry_times=3)
    results = pool.run(split_units([Task(raw={}, task_id="a"), Task(raw={}, task_id="b")], None))
    assert all(r.attempts == 1 and r.user_error is not None for r in results)
    with pytest.raises(UserError, match="every task failed"):
        raise_if_all_misconfigured(results)


def test_runner_states_show_the_running_task():
    started = threading.Event()
    release = threading.Event()

    class Waits:
        can_repeat = True

        def __init__(self, task):
            pass

        def run(self):
            started.set()
            release.wait(5)
            return [_experience()]

    pool = RunnerPool(make_workflow=lambda t, r: Waits(t), num_runners=1)
    thread = threading.Thread(target=pool.run, args=(split_units([Task(raw={}, task_id="busy")], None),))
    thread.start()
    started.wait(5)
    [state] = pool.snapshot_states().values()
    assert state["status"] == "running" and state["task_id"] == "busy" and state["elapsed_seconds"] >= 0
    release.set()
    thread.join(5)
    assert pool.snapshot_states()[0] == {"status": "idle"}


class AskAfterAWhile:
    """Prepares its prompt for a while (staggered by task), then asks the model once."""

    def __init__(self, task, model):
        self.task, self.model = task, model

    def run(self):
        time.sleep(0.005 * int(self.task.task_id))
        experiences = self.model.chat([{"role": "user", "content": "1 + 1"}], n=self.task.repeat_times)
        for exp in experiences:
            exp.reward = 1.0
        return experiences


def test_a_step_of_workflows_reaches_the_engine_as_one_call(tiny_model_dir):
    from trivium.models.engine import create_engine
    from trivium.models.engine.busy_clients import BusyClients
    from trivium.models.wrapper import ModelWrapper

    wrapper = ModelWrapper(create_engine("hf", model_path=tiny_model_dir, seed=0), max_response_tokens=3)
    busy = BusyClients()
    wrapper.share_busy_clients(busy)
    wrapper._batcher.max_gather_seconds = 5.0  # a loaded machine may start the runner threads late
    pool = RunnerPool(make_workflow=lambda task, runner: AskAfterAWhile(task, wrapper), num_runners=6, busy=busy)
    tasks = [Task(raw={}, task_id=str(i), repeat_times=2) for i in range(6)]
    results = pool.run(split_units(tasks, None))
    assert [len(r.experiences) for r in results] == [2] * 6
    assert wrapper._batcher.calls == 1
    assert busy.count == 0  # every workflow finished
    # Twelve tasks on six runners: the second six start as the first finish; still few calls.
    results = pool.run(split_units([Task(raw={}, task_id=str(i % 6), repeat_times=2) for i in range(12)], None))
    assert all(r.ok for r in results) and wrapper._batcher.calls <= 1 + 3
    wrapper.close()
    pool.shutdown()


def test_a_workflow_spinning_past_its_timeout_is_stopped_and_frees_the_cpu():
    import threading
    import time

    from trivium.explorer.runner import WorkflowTimeout, call_with_timeout

    spinning, unwound = threading.Event(), threading.Event()

    def spin():
        spinning.set()
        count = 0
        try:
            while True:  # pure Python: the stop request lands at the next instruction
                count += 1
        finally:
            unwound.set()

    started = time.monotonic()
    with pytest.raises(WorkflowTimeout, match="did not finish within 1s; it was stopped"):
        call_with_timeout(spin, 1.0)
    assert spinning.is_set() and unwound.is_set() and time.monotonic() - started < 4


def test_a_workflow_blocked_in_native_code_is_counted_as_stuck_until_it_returns(monkeypatch):
    import time

    from trivium.explorer import runner
    from trivium.explorer.runner import WorkflowTimeout, call_with_timeout, stuck_workflows

    monkeypatch.setattr(runner, "_cancelled_threads", set())  # other tests' sleeping workflows aside
    monkeypatch.setattr(runner, "CANCEL_GRACE_SECONDS", 0.2)
    with pytest.raises(WorkflowTimeout, match="blocked in native code"):
        call_with_timeout(lambda: time.sleep(2.0), 0.5)  # time.sleep does not run Python code
    assert stuck_workflows() == 1
    time.sleep(2.0)
    assert stuck_workflows() == 0
