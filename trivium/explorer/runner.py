"""Running workflows: a pool of runners, each attempt bounded by a timeout and retried.

A workflow that raises, hangs or returns garbage never stops the run: the failure is retried
up to ``max_retry_times``, then counted and logged with the task id. Each runner has its own
log file through its logger.

An attempt that times out is stopped: ``WorkflowCancelled`` is raised inside its thread (at
the next Python instruction it runs), so a workflow spinning in Python code ends and frees the
CPU. A thread blocked in native code (a socket read without a timeout, a long C call) only sees
it when that call returns; until then it is counted in ``rollout/stuck_workflows`` and its result
is discarded. Asynchronous workflows are cancelled by asyncio instead.

An attempt's time limit is ``max_timeout``, or with a ``DynamicTimeout`` the mean time of the
successful attempts so far times its ratio. A step that goes on without its late jobs
(over-rollout) ``abandon``s them: queued ones never start, running ones are stopped like a
timed-out attempt and not retried.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Callable

from trivium.core.background_call import BackgroundCall
from trivium.core.experience import Experience
from trivium.core.experience_check import experience_problem
from trivium.core.reward_check import MAX_ABS_REWARD
from trivium.core.task import Task
from trivium.errors import ComponentDied, UserError
from trivium.explorer.dynamic_timeout import DynamicTimeout
from trivium.models.engine.busy_clients import BusyClients


class WorkflowTimeout(Exception):
    pass


class WorkflowAbandoned(Exception):
    """The step that submitted the job went on without it (over-rollout)."""


class WorkflowCancelled(BaseException):
    """Raised inside a workflow's thread when its attempt timed out (a BaseException, so a
    workflow's own ``except Exception`` does not swallow it)."""


# Threads of timed-out attempts told to stop; those still alive are stuck in native code.
_cancelled_threads: set[threading.Thread] = set()
_cancelled_lock = threading.Lock()
# How long (at most: never longer than the timeout itself) a timed-out attempt's thread gets
# to unwind after being told to stop.
CANCEL_GRACE_SECONDS = 2.0
# How often an attempt that may be abandoned checks whether it was.
CANCEL_POLL_SECONDS = 0.05


def stuck_workflows() -> int:
    """Timed-out workflow threads that have not stopped yet."""
    with _cancelled_lock:
        _cancelled_threads.difference_update([t for t in _cancelled_threads if not t.is_alive()])
        return len(_cancelled_threads)


def _raise_in_thread(thread: threading.Thread, exception: type[BaseException]) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))


class InvalidWorkflowOutput(Exception):
    pass


@dataclass
class RunUnit:
    """A task, or a slice of its repeats when ``max_repeat_times_per_runner`` splits it."""

    task: Task
    run_id_offset: int = 0


@dataclass
class UnitResult:
    unit: RunUnit
    experiences: list[Experience] = field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    # The last failure was a UserError: bad config or data, which a retry cannot fix.
    user_error: UserError | None = None
    # Experiences of the successful attempt left out at the door, each with its reason.
    dropped: list[str] = field(default_factory=list)
    abandoned: bool = False  # its step went on without it (over-rollout)

    @property
    def ok(self) -> bool:
        return self.error is None


def split_units(tasks: list[Task], max_repeat_per_runner: int | None) -> list[RunUnit]:
    units = []
    for task in tasks:
        chunk = max_repeat_per_runner or task.repeat_times
        for start in range(0, task.repeat_times, max(1, chunk)):
            size = min(chunk, task.repeat_times - start)
            units.append(RunUnit(task=replace(task, repeat_times=size), run_id_offset=start))
    return units


def validate_output(
    output: Any, *, vocab_size: int | None = None, max_abs_reward: float = MAX_ABS_REWARD
) -> tuple[list[Experience], list[str]]:
    """(experiences that may enter the buffer, reasons for each one dropped).

    Output that is not a list of Experience, an empty list, or a list in which every
    experience is unusable is a failed attempt (``InvalidWorkflowOutput``), retried like a crash.
    """
    if not isinstance(output, list) or not all(isinstance(e, Experience) for e in output):
        raise InvalidWorkflowOutput(f"a workflow must return a list of Experience, got {_describe(output)}")
    if not output:
        raise InvalidWorkflowOutput("the workflow returned no experiences (an empty list)")
    kept, dropped = [], []
    for index, exp in enumerate(output):
        problem = experience_problem(exp, vocab_size=vocab_size, max_abs_reward=max_abs_reward)
        if problem is None:
            kept.append(exp)
        else:
            dropped.append(f"experience {index}: {problem}")
    if not kept:
        raise InvalidWorkflowOutput(f"every experience is unusable; {dropped[0]}")
    return kept, dropped


def _describe(output: Any) -> str:
    if isinstance(output, list):
        wrong = next(e for e in output if not isinstance(e, Experience))
        return f"a list holding a {type(wrong).__name__}"
    return type(output).__name__


def call_with_timeout(fn: Callable[[], Any], timeout: float | None, *, cancel: threading.Event | None = None) -> Any:
    """Run ``fn`` in a daemon thread; past ``timeout`` (or once ``cancel`` is set), stop it and raise
    WorkflowTimeout (or WorkflowAbandoned)."""
    if not timeout:
        return fn()
    call = BackgroundCall(fn, name="workflow-attempt", ignore=(WorkflowCancelled,))
    deadline = time.monotonic() + timeout
    # With a cancel event, look at it every CANCEL_POLL_SECONDS; otherwise one wait.
    while not call.wait(min(CANCEL_POLL_SECONDS, deadline - time.monotonic()) if cancel else timeout):
        abandoned = cancel is not None and cancel.is_set()
        if not abandoned and time.monotonic() < deadline:
            continue
        with _cancelled_lock:
            _cancelled_threads.add(call.thread)
        _raise_in_thread(call.thread, WorkflowCancelled)
        stopped = call.wait(min(CANCEL_GRACE_SECONDS, timeout))
        how = "it was stopped" if stopped else "its thread is blocked in native code and is left to finish"
        if abandoned:
            raise WorkflowAbandoned(f"the step went on without this workflow; {how}")
        raise WorkflowTimeout(f"workflow did not finish within {timeout:g}s; {how}")
    return call.result()


def raise_if_all_misconfigured(results: list[UnitResult]) -> None:
    """A step where every task failed on the same user error stops the run with that error."""
    if results and all(r.user_error is not None for r in results):
        raise UserError(f"every task failed: {results[0].user_error}")


class RunnerPool:
    """``num_runners`` runners working through units of one step concurrently."""

    def __init__(
        self,
        *,
        make_workflow: Callable[[Task, int], Any],
        num_runners: int,
        concurrent_mode: str = "sequential",
        max_timeout: float | None = 900,
        max_retry_times: int = 2,
        runner_loggers: list[logging.Logger] | None = None,
        logger: logging.Logger | None = None,
        busy: BusyClients | None = None,
        vocab_size: int | None = None,
        max_abs_reward: float = MAX_ABS_REWARD,
        dynamic_timeout: DynamicTimeout | None = None,
    ):
        self.make_workflow = make_workflow
        self.num_runners = max(1, num_runners)
        self.concurrent_mode = concurrent_mode
        self.max_timeout = max_timeout
        self.max_retry_times = max(0, max_retry_times)
        self.logger = logger or logging.getLogger("trivium.explorer")
        self.runner_loggers = runner_loggers or [self.logger] * self.num_runners
        self.executor = ThreadPoolExecutor(max_workers=self.num_runners, thread_name_prefix="runner")
        self.runner_states: dict[int, dict[str, Any]] = {i: {"status": "idle"} for i in range(self.num_runners)}
        self._free_runners: list[int] = list(range(self.num_runners))
        self._lock = threading.Lock()
        # Tells the model batchers how many workflows are running (see BusyClients).
        self.busy = busy
        self._unfinished = 0
        # What an experience must satisfy to enter the buffer (see experience_problem).
        self.vocab_size = vocab_size
        self.max_abs_reward = max_abs_reward
        self.dynamic_timeout = dynamic_timeout
        # The cancel event of each submitted job not finished yet (see abandon).
        self._cancel_events: dict[Future, threading.Event] = {}

    def run(self, units: list[RunUnit]) -> list[UnitResult]:
        """Run every unit and wait for all of them."""
        return [future.result() for future in self.submit(units, abandonable=False)]

    def submit(self, units: list[RunUnit], *, abandonable: bool = True) -> list[Future]:
        """Start every unit; each future gives its ``UnitResult``. ``abandonable``: ``abandon`` may stop them."""
        # Counted before any starts, so the first request does not go out alone.
        self._count_unfinished(len(units))
        futures = []
        for unit in units:
            cancel = threading.Event() if abandonable else None
            future = self.executor.submit(self._run_unit, unit, cancel)
            if cancel is not None:
                with self._lock:
                    self._cancel_events[future] = cancel
                future.add_done_callback(self._forget_cancel_event)
            futures.append(future)
        return futures

    def abandon(self, futures: list[Future]) -> None:
        """Jobs whose step went on without them: queued ones never start, running ones are stopped."""
        for future in futures:
            if future.cancel():
                self._count_unfinished(-1)  # it never ran, so _run_unit will not count it
                continue
            with self._lock:
                cancel = self._cancel_events.get(future)
            if cancel is not None:
                cancel.set()

    def attempt_timeout(self) -> float | None:
        """The time limit of the next attempt: dynamic when configured, else max_timeout."""
        return self.dynamic_timeout.current() if self.dynamic_timeout is not None else self.max_timeout

    def _forget_cancel_event(self, future: Future) -> None:
        with self._lock:
            self._cancel_events.pop(future, None)

    def _count_unfinished(self, delta: int) -> None:
        with self._lock:
            self._unfinished += delta
            running = min(self._unfinished, self.num_runners)
        if self.busy is not None:
            self.busy.set_running(running)

    def snapshot_states(self) -> dict[int, dict[str, Any]]:
        """Each runner's status, with how long its current task has run."""
        now = time.monotonic()
        states = {}
        for runner_id, state in list(self.runner_states.items()):
            state = dict(state)
            started = state.pop("started", None)
            if started is not None:
                state["elapsed_seconds"] = now - started
            states[runner_id] = state
        return states

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _acquire_runner(self) -> int:
        with self._lock:
            return self._free_runners.pop() if self._free_runners else 0

    def _release_runner(self, runner_id: int) -> None:
        with self._lock:
            self.runner_states[runner_id] = {"status": "idle"}
            self._free_runners.append(runner_id)

    def _run_unit(self, unit: RunUnit, cancel: threading.Event | None = None) -> UnitResult:
        runner_id = self._acquire_runner()
        log = self.runner_loggers[runner_id % len(self.runner_loggers)]
        result = UnitResult(unit=unit)
        start = time.perf_counter()
        try:
            for attempt in range(self.max_retry_times + 1):
                if cancel is not None and cancel.is_set():
                    break  # abandoned: no further attempts
                result.attempts = attempt + 1
                self.runner_states[runner_id] = {
                    "status": "running",
                    "task_id": unit.task.task_id,
                    "attempt": attempt + 1,
                    "started": time.monotonic(),
                }
                try:
                    attempt_start = time.perf_counter()
                    output = self._attempt(unit, runner_id, self.attempt_timeout(), cancel)
                    self._take_output(output, result, seconds=time.perf_counter() - attempt_start, log=log)
                    break
                except ComponentDied:
                    raise  # an engine's process is gone: no retry can help, the run stops
                except WorkflowAbandoned as error:
                    result.error, result.abandoned = f"{type(error).__name__}: {error}", True
                    break
                except UserError as error:
                    # The same config or data mistake fails every attempt; do not retry it.
                    result.error = f"{type(error).__name__}: {error}"
                    result.user_error = error
                    log.error("task %s: %s", unit.task.task_id, error)
                    break
                except Exception as error:  # any workflow failure is retried, then counted
                    result.timeouts += isinstance(error, WorkflowTimeout)
                    result.error = f"{type(error).__name__}: {error}"
                    log.warning(
                        "task %s failed (attempt %d/%d): %s",
                        unit.task.task_id,
                        attempt + 1,
                        self.max_retry_times + 1,
                        result.error,
                    )
                    log.debug("%s", traceback.format_exc())
            if result.abandoned or (cancel is not None and cancel.is_set() and result.error):
                result.abandoned = True
                log.info("task %s: abandoned, its step went on without it", unit.task.task_id)
            elif result.error:
                self.logger.error("task %s gave up after %d attempts: %s", unit.task.task_id, result.attempts, result.error)
        finally:
            result.seconds = time.perf_counter() - start
            self._release_runner(runner_id)
            self._count_unfinished(-1)
        return result

    def _take_output(self, output: Any, result: UnitResult, *, seconds: float, log: logging.Logger) -> None:
        """A finished attempt's experiences, checked (what fails the checks is dropped and logged)
        and labelled with their task, group and run ids; a check that raises fails the attempt."""
        unit = result.unit
        experiences, dropped = validate_output(
            output, vocab_size=self.vocab_size, max_abs_reward=self.max_abs_reward
        )
        if self.dynamic_timeout is not None:
            self.dynamic_timeout.record_success(seconds)
        for reason in dropped:
            log.warning("task %s: dropped %s", unit.task.task_id, reason)
        result.dropped = dropped
        for i, exp in enumerate(experiences):
            exp.group_id = exp.group_id or unit.task.task_id
            exp.task_id = unit.task.task_id
            exp.run_id = unit.run_id_offset + i
        result.experiences, result.error, result.user_error = experiences, None, None

    def _attempt(
        self, unit: RunUnit, runner_id: int, timeout: float | None, cancel: threading.Event | None
    ) -> list[Experience]:
        workflow = self.make_workflow(unit.task, runner_id)
        repeats_itself = getattr(workflow, "can_repeat", True)
        if self.concurrent_mode == "asynchronous":
            return self._attempt_async(unit, runner_id, workflow, repeats_itself, timeout)
        if repeats_itself or unit.task.repeat_times == 1:
            return call_with_timeout(workflow.run, timeout, cancel=cancel)
        # One workflow instance per sample when the workflow cannot produce several itself.
        single = replace(unit.task, repeat_times=1)
        workflows = [workflow] + [self.make_workflow(single, runner_id) for _ in range(unit.task.repeat_times - 1)]
        if self.concurrent_mode == "multi-threading":
            with ThreadPoolExecutor(max_workers=len(workflows)) as pool:
                parts = list(pool.map(lambda w: call_with_timeout(w.run, timeout, cancel=cancel), workflows))
        else:
            parts = [call_with_timeout(w.run, timeout, cancel=cancel) for w in workflows]
        return [exp for part in parts for exp in part]

    def _attempt_async(
        self, unit: RunUnit, runner_id: int, workflow: Any, repeats_itself: bool, timeout: float | None
    ) -> list[Experience]:
        if repeats_itself or unit.task.repeat_times == 1:
            workflows = [workflow]
        else:
            single = replace(unit.task, repeat_times=1)
            workflows = [workflow] + [self.make_workflow(single, runner_id) for _ in range(unit.task.repeat_times - 1)]

        async def run_all() -> list[list[Experience]]:
            calls = [asyncio.wait_for(w.run_async(), timeout) for w in workflows]
            return await asyncio.gather(*calls)

        try:
            parts = asyncio.run(run_all())
        except asyncio.TimeoutError as error:
            raise WorkflowTimeout(f"workflow did not finish within {timeout:g}s") from error
        return [exp for part in parts for exp in part]
