"""Merge generate requests that arrive concurrently into one engine call.

Workflow runners call the model from many threads or coroutines, each with a handful of
prompts. Sampling a batch of 64 costs little more per step than a batch of 8, so the
batcher queues requests and, whenever the engine is free, sends everything waiting as ONE
``engine.generate`` call (each prompt keeps its own SamplingParams). A request that arrives
while the engine is busy simply joins the next batch. Given a ``BusyClients`` gauge, the
batcher also holds an idle engine back while some caller is still preparing its request,
for at most ``max_gather_seconds``, so that one explorer step makes one call.

Between explorer steps the serving thread is parked (it exits; the next request starts a
new one). A thread that has run multi-threaded torch ops keeps its own OpenMP team alive, and
while more OpenMP threads exist than cores, libgomp cuts its spin-waits short: every torch op
in the process, the trainer's included, then runs about 25% slower on a 2-core machine.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams
from trivium.models.engine.busy_clients import BusyClients

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    prompts: list[list[int]]
    params: list[SamplingParams]
    future: Future = field(default_factory=Future)

    @property
    def rows(self) -> int:
        return sum(p.n for p in self.params)


class RequestBatcher:
    """Thread-safe front door to an engine; one background thread talks to the engine."""

    def __init__(
        self,
        engine: InferenceEngine,
        max_rows_per_call: int = 512,
        busy: BusyClients | None = None,
        max_gather_seconds: float = 0.05,
    ):
        self.engine = engine
        self.max_rows_per_call = max_rows_per_call
        self.busy = busy
        self.max_gather_seconds = max_gather_seconds
        self._pending: deque[_Request] = deque()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._parking = False
        self.calls = 0  # engine calls made; requests / calls is the merge factor

    def submit(self, prompts: list[list[int]], params: list[SamplingParams]) -> Future:
        """Queue prompts (one SamplingParams each); the future yields ``n`` outputs per prompt."""
        request = _Request(list(prompts), list(params))
        with self._wakeup:
            if self._closed:
                raise RuntimeError("the request batcher is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="trivium-request-batcher", daemon=True
                )
                self._thread.start()
            self._pending.append(request)
            self._wakeup.notify()
        return request.future

    def park(self) -> None:
        """Let the serving thread exit once nothing is queued (see the module docstring)."""
        with self._wakeup:
            thread = self._thread
            if thread is None:
                return
            self._parking = True
            self._wakeup.notify()
        thread.join()

    def close(self) -> None:
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=60)

    def _take_batch(self) -> list[_Request] | None:
        with self._wakeup:
            while not self._pending and not self._closed and not self._parking:
                self._wakeup.wait()
            if not self._pending:
                # Under the lock, so a concurrent submit either is served or starts a new thread.
                self._thread, self._parking = None, False
                return None
        if self.busy is not None:
            # Only this thread takes from the queue, so it can only grow meanwhile.
            self.busy.wait_until_idle(self.max_gather_seconds)
        with self._wakeup:
            batch = [self._pending.popleft()]
            rows = batch[0].rows
            while self._pending and rows + self._pending[0].rows <= self.max_rows_per_call:
                rows += self._pending[0].rows
                batch.append(self._pending.popleft())
            return batch

    def _serve(self) -> None:
        while (batch := self._take_batch()) is not None:
            batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
            if batch:
                self._run(batch)

    def _run(self, batch: list[_Request]) -> None:
        prompts = [p for r in batch for p in r.prompts]
        params = [p for r in batch for p in r.params]
        try:
            self.calls += 1
            outputs: list[list[GenerationOutput]] = self.engine.generate(prompts, params)
        except BaseException as error:  # noqa: BLE001 - delivered to the callers
            if len(batch) == 1:
                batch[0].future.set_exception(error)
                return
            # One bad request must not fail its neighbours: retry each on its own.
            logger.debug("merged batch failed (%s); retrying %d requests one by one", error, len(batch))
            for request in batch:
                self._run([request])
            return
        start = 0
        for request in batch:
            request.future.set_result(outputs[start : start + len(request.prompts)])
            start += len(request.prompts)
