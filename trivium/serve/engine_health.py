"""Serve mode's health checks: every serving engine samples one token every so many seconds.

Owns the checking thread. Every ``interval`` seconds each engine in rotation samples one
greedy token; an engine whose check raises, or does not answer within ``interval`` seconds
(the next check is due by then) while answering no other call, leaves the rotation through
``EnginePool.take_out``, which logs its index and the cause and fails the pool below ``explorer.min_running_model_num``.
Engines loading new weights are not checked: their load is their check.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from trivium.core.background_call import BackgroundCall
from trivium.models.engine.base import InferenceEngine, SamplingParams
from trivium.serve.engine_pool import SERVING, EnginePool

logger = logging.getLogger("trivium.serve")

CHECK_PARAMS = SamplingParams(temperature=0.0, max_tokens=1, min_tokens=1, n=1)


def check_prompt(engine: InferenceEngine) -> list[int]:
    """A one-token prompt every tokenizer has: its end-of-sequence (or padding) token."""
    tokenizer = engine.tokenizer
    for token in (getattr(tokenizer, "eos_token_id", None), getattr(tokenizer, "pad_token_id", None)):
        if isinstance(token, int):
            return [token]
    return [0]


@dataclass(frozen=True)
class CheckFailure:
    cause: str
    timed_out: bool = False  # no answer in time: stuck, or only busy with other calls


def check_engine(engine: InferenceEngine, *, timeout: float) -> CheckFailure | None:
    """None when ``engine`` samples a token within ``timeout`` seconds; else why not."""
    call = BackgroundCall(lambda: engine.generate([check_prompt(engine)], CHECK_PARAMS), name="engine-check")
    if not call.wait(timeout):
        return CheckFailure(
            f"its health check did not answer within {timeout:g} s (explorer.service_status_check_interval)",
            timed_out=True,
        )
    try:
        outputs = call.result()
    except Exception as error:  # noqa: BLE001 - any error of the engine fails its check
        return CheckFailure(f"its health check raised {type(error).__name__}: {error}")
    if len(outputs) != 1 or len(outputs[0]) != 1 or not outputs[0][0].token_ids:
        return CheckFailure(f"its health check sampled no token (got {outputs!r})")
    return None


class HealthChecker:
    """Checks the pool's serving engines every ``interval`` seconds until ``stop``."""

    def __init__(self, pool: EnginePool, *, interval: float):
        self.pool = pool
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-health", daemon=True)

    def start(self) -> HealthChecker:
        self._thread.start()
        return self

    def check_now(self) -> None:
        """One round of checks: every engine in rotation, one after another."""
        for index in self.pool.in_rotation():
            start = time.perf_counter()
            answered_before = self.pool.calls_answered(index)
            problem = check_engine(self.pool.engines[index], timeout=self.interval)
            if self._stop.is_set():  # the run is ending: its engines are being closed
                return
            self.pool.note_check(index, time.perf_counter() - start)
            if problem is None or self.pool.status_of(index) != SERVING:
                continue  # an engine that began loading meanwhile answered late because of its load
            if problem.timed_out and self.pool.calls_answered(index) > answered_before:
                # Busy, not stuck: it answered other calls while the check waited in line.
                logger.warning("engine %d answered its health check late (busy); it stays in rotation", index)
                continue
            self.pool.take_out(index, problem.cause)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check_now()
            except Exception:  # a bug here must not end the checks silently
                logger.exception("the engine health check failed")

    def stop(self) -> None:
        """No more checks; a check under way is left to end on its own (its result is dropped)."""
        self._stop.set()
