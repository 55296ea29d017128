"""Serve mode's rollout engines as one pool: which engine answers a request, which are in rotation.

Owns each engine's state (``serving``, ``loading``, ``failed`` with its cause), the sampled
rows each has in flight, and the choice of engine for a call:

* a call with a home engine (a recorded session's, see ``routed``) goes to its home while
  the home serves, so a session's turns stay on one engine and reuse what it cached;
* any other call, and a session's turn while its home is out of rotation, goes to the
  serving engine with the fewest sampled rows in flight (ties in turn).

A session's record does not depend on the engine: its conversation's exact tokens are kept by
the session's wrapper view, and every turn records the version of the engine that sampled it.

``roll`` loads a new version in turns: at most ``engine_num - min_running`` engines leave the
rotation at once, wait for their calls in flight, load, and come back; calls arriving
meanwhile go to the serving engines. With ``min_running == engine_num`` no engine may leave,
so each loads in place and the calls given to it wait for its load (the single-engine case).
An engine whose load or health check fails leaves the rotation for good (``take_out``); when
fewer than ``min_running`` remain, the pool fails: calls are refused with 503 and ``failure``
holds the error the run ends with. Health checks are ``trivium.serve.engine_health``'s; the
HTTP surface is ``trivium.models.server``'s. Knows nothing about weights' transport.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams, params_per_prompt
from trivium.models.server_guard import HTTPProblem

logger = logging.getLogger("trivium.serve")

SERVING, LOADING, FAILED = "serving", "loading", "failed"
MIN_RUNNING_KEY = "explorer.min_running_model_num"


class NoServingEngine(HTTPProblem):
    """No engine is in rotation (HTTP 503)."""

    status = 503
    error_type = "service_unavailable"


class TooFewEngines(UserError):
    """Fewer engines serve than ``explorer.min_running_model_num``: the run ends with this."""


@dataclass
class EngineState:
    index: int
    status: str = SERVING
    cause: str | None = None  # why a failed engine left the rotation
    rows_in_flight: int = 0
    calls_answered: int = 0
    last_check_seconds: float | None = None  # how long its last health check took


class EnginePool:
    """The served engines; safe from the HTTP threads, the trainer thread and the health checker."""

    def __init__(
        self,
        engines: Sequence[InferenceEngine],
        *,
        min_running: int,
        on_failure: Callable[[TooFewEngines], None] | None = None,
    ):
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        if not 1 <= min_running <= len(engines):
            raise UserError(
                f"{MIN_RUNNING_KEY} is {min_running}; it must be between 1 and "
                f"explorer.rollout_model.engine_num ({len(engines)})"
            )
        self.engines = list(engines)
        self.min_running = min_running
        self.on_failure = on_failure
        self.failure: TooFewEngines | None = None
        self._states = [EngineState(index) for index in range(len(engines))]
        self._changed = threading.Condition()
        self._turn = itertools.count()
        self._roll_lock = threading.Lock()  # one version rolls out at a time

    # ------------------------------------------------------------------ routing
    def routed(self, home: int | None = None) -> RoutedEngine:
        """An engine whose calls this pool routes; ``home``: the engine it prefers while that one serves."""
        return RoutedEngine(self, home)

    def call(self, home: int | None, rows: int, work: Callable[[InferenceEngine], object]) -> object:
        """``work(engine)`` on the engine the routing rule picks, counting its ``rows`` in flight."""
        index = self._acquire(home, rows)
        answered = False
        try:
            result = work(self.engines[index])
            answered = True
            return result
        finally:
            with self._changed:
                self._states[index].rows_in_flight -= rows
                self._states[index].calls_answered += answered
                self._changed.notify_all()

    def _acquire(self, home: int | None, rows: int) -> int:
        with self._changed:
            serving = [s for s in self._states if s.status == SERVING]
            if not serving:
                raise NoServingEngine(self._no_engine_message())
            if home is not None and self._states[home].status == SERVING:
                chosen = self._states[home]
            else:
                fewest = min(s.rows_in_flight for s in serving)
                tied = [s for s in serving if s.rows_in_flight == fewest]
                chosen = tied[next(self._turn) % len(tied)]
            chosen.rows_in_flight += rows
            return chosen.index

    def _no_engine_message(self) -> str:
        if self.failure is not None:
            return f"no engine serves: {self.failure}"
        return "no engine serves right now (every engine is loading new weights); retry shortly"

    # ------------------------------------------------------------------ state
    def in_rotation(self) -> list[int]:
        with self._changed:
            return [s.index for s in self._states if s.status == SERVING]

    def status_of(self, index: int) -> str:
        with self._changed:
            return self._states[index].status

    def alive(self) -> list[int]:
        """Engines not failed: serving, or loading and coming back."""
        with self._changed:
            return [s.index for s in self._states if s.status != FAILED]

    def version(self) -> int:
        """The version every live engine serves at least (all of them once a roll is done)."""
        alive = self.alive() or range(len(self.engines))
        return min(self.engines[index].version() for index in alive)

    def statuses(self) -> list[dict]:
        """Each engine's state, as ``GET /engines`` shows it."""
        with self._changed:
            states = [EngineState(**vars(s)) for s in self._states]
        return [
            {
                "index": s.index,
                "status": s.status,
                "model_version": self.engines[s.index].version(),
                "rows_in_flight": s.rows_in_flight,
                "calls_answered": s.calls_answered,
                "last_check_seconds": s.last_check_seconds,
                "cause": s.cause,
            }
            for s in states
        ]

    def report(self) -> dict:
        """What ``GET /engines`` answers: every engine's state, the rule and the version all serve."""
        return {
            "engines": self.statuses(),
            "min_running": self.min_running,
            "model_version": self.version(),
            "failure": None if self.failure is None else str(self.failure),
        }

    def calls_answered(self, index: int) -> int:
        with self._changed:
            return self._states[index].calls_answered

    def note_check(self, index: int, seconds: float) -> None:
        with self._changed:
            self._states[index].last_check_seconds = round(seconds, 3)

    def take_out(self, index: int, cause: str) -> None:
        """Engine ``index`` failed: out of rotation for good; below ``min_running`` the pool fails."""
        with self._changed:
            state = self._states[index]
            if state.status == FAILED:
                return
            state.status, state.cause = FAILED, cause
            alive = [s.index for s in self._states if s.status != FAILED]
            failed = [s for s in self._states if s.status == FAILED]
            self._changed.notify_all()
        logger.error("engine %d left the rotation: %s", index, cause)
        if len(alive) < self.min_running and self.failure is None:
            causes = "; ".join(f"engine {s.index}: {s.cause}" for s in failed)
            left = ", ".join(f"engine {index}" for index in alive) or "none"
            self.failure = TooFewEngines(
                f"{len(alive)} of {len(self.engines)} engines left ({left}), fewer than "
                f"{MIN_RUNNING_KEY}={self.min_running}; failed: {causes}"
            )
            logger.error("%s", self.failure)
            if self.on_failure is not None:
                self.on_failure(self.failure)

    # ------------------------------------------------------------------ weights
    def roll(self, version: int, load: Callable[[InferenceEngine], int]) -> None:
        """Load ``version`` into every live engine in turns; ``load(engine)`` returns the version it confirms.

        An engine whose load fails leaves the rotation (the others go on); ``TooFewEngines`` if
        that leaves fewer than ``min_running``.
        """
        with self._roll_lock:
            pending = [index for index in self.alive() if self.engines[index].version() != version]
            while pending:
                if self.failure is not None:
                    raise self.failure
                out_at_once = max(1, len(self.alive()) - self.min_running)
                group, pending = pending[:out_at_once], pending[out_at_once:]
                leaves = len(self.alive()) - len(group) >= self.min_running
                if leaves:
                    self._leave_rotation(group)
                for index in group:
                    self._load_one(index, version, load)
                if leaves:
                    self._rejoin(group)
            if self.failure is not None:
                raise self.failure

    def _leave_rotation(self, group: list[int]) -> None:
        """Mark ``group`` loading (no new calls) and wait for the calls they are running."""
        with self._changed:
            for index in group:
                if self._states[index].status == SERVING:
                    self._states[index].status = LOADING
            self._changed.wait_for(lambda: all(self._states[i].rows_in_flight == 0 for i in group))

    def _rejoin(self, group: list[int]) -> None:
        with self._changed:
            for index in group:
                if self._states[index].status == LOADING:
                    self._states[index].status = SERVING
            self._changed.notify_all()

    def _load_one(self, index: int, version: int, load: Callable[[InferenceEngine], int]) -> None:
        try:
            confirmed = load(self.engines[index])
            if confirmed != version:
                raise RuntimeError(f"it confirmed version {confirmed} after loading {version}")
        except Exception as error:  # noqa: BLE001 - whatever the engine raised, it leaves the rotation
            self.take_out(index, f"loading version {version} failed: {type(error).__name__}: {error}")
            return
        logger.info("engine %d serves version %d", index, version)


class RoutedEngine(InferenceEngine):
    """The engine interface over a pool: each call runs on the engine the pool picks.

    The server and the sessions' wrappers sample through it as through one engine; every
    output carries the version of the engine that made it. Weights reach the engines through
    ``EnginePool.roll``, never through this object.
    """

    def __init__(self, pool: EnginePool, home: int | None):
        self.pool = pool
        self.home = home
        self.tokenizer = pool.engines[0].tokenizer
        # The same model in every engine: token ids outside it are refused before any engine is picked.
        self.vocab_size = getattr(pool.engines[0], "vocab_size", None)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        rows = sum(p.n for p in params_per_prompt(prompts, params))
        return self.pool.call(self.home, rows, lambda engine: engine.generate(prompts, params))

    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]):
        return self.pool.call(
            self.home, len(sequences), lambda engine: engine.compute_logprobs(sequences, prompt_lengths)
        )

    def update_weights(self, state_dict, version: int) -> int:
        raise RuntimeError("a routed engine takes no weights; EnginePool.roll loads them into the engines")

    def version(self) -> int:
        return self.pool.version()
