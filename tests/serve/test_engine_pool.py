"""Serve mode's engine pool: calls go to engines in rotation, weights roll in turns, failed engines leave.

Real tiny hf engines; a weight load is held open by a gate around the engine's own update
(the load holds the engine's lock, as a slow transfer would), so the test decides when it ends.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from trivium.models.engine import create_engine
from trivium.models.engine.base import SamplingParams
from trivium.models.served_sessions import SessionRecorder
from trivium.models.server import serve_in_thread
from trivium.models.wrapper import ModelWrapper
from trivium.serve.engine_health import HealthChecker, check_engine
from trivium.serve.engine_pool import EnginePool, TooFewEngines

PARAMS = SamplingParams(temperature=1.0, max_tokens=3, seed=1)
QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    pair = [create_engine("hf", model_path=tiny_model_dir, seed=0) for _ in range(2)]
    yield pair
    for engine in pair:
        engine.close()


@pytest.fixture()
def fresh(engines):
    """Both engines back at version 0 with their original weights after each test."""
    original = {name: tensor.clone() for name, tensor in engines[0].model.state_dict().items()}
    yield engines
    for engine in engines:
        engine.update_weights(original, 0)


def new_weights(engine) -> dict[str, torch.Tensor]:
    name, tensor = next(iter(engine.model.state_dict().items()))
    return {name: tensor + 0.05}


class GatedLoad:
    """Loads ``weights`` into an engine while holding its lock until the test opens that engine's gate."""

    def __init__(self, pool: EnginePool, weights: dict[str, torch.Tensor], version: int):
        self.pool, self.weights, self.version = pool, weights, version
        self.started = [threading.Event() for _ in pool.engines]
        self.gates = [threading.Event() for _ in pool.engines]

    def __call__(self, engine) -> int:
        index = self.pool.engines.index(engine)
        with engine._lock:  # a request sent to this engine now waits, as during a slow load
            self.started[index].set()
            assert self.gates[index].wait(30), "the test never opened the gate"
            return engine.update_weights(self.weights, self.version)


def wrappers_of(pool: EnginePool) -> list[ModelWrapper]:
    return [ModelWrapper(pool.routed(home), max_response_tokens=3, max_model_len=160) for home in range(2)]


def answer_all(routed, count: int) -> list[int]:
    """``count`` concurrent calls; the version of each answer (raises if any is not answered in 20 s)."""
    with ThreadPoolExecutor(count) as threads:
        futures = [threads.submit(routed.generate, [[1, 2, 3]], PARAMS) for _ in range(count)]
        return [future.result(timeout=20)[0][0].model_version for future in futures]


def test_requests_during_a_rolling_load_are_answered_by_the_serving_engine_with_its_version(fresh):
    pool = EnginePool(fresh, min_running=1)
    weights = new_weights(fresh[0])
    load = GatedLoad(pool, weights, version=1)
    wrappers = wrappers_of(pool)
    recorder = SessionRecorder(wrappers=wrappers, write=lambda experiences: None, version=pool.version)
    first = recorder.chat("s", QUESTION, tools=None, n=1, rollout_args={})[0]  # the session's home: engine 0
    roll = threading.Thread(target=pool.roll, args=(1, load))
    roll.start()
    try:
        assert load.started[0].wait(20)
        # Engine 0 loads (its lock held): every call goes to engine 1, none waits, all say version 0.
        assert [s["status"] for s in pool.statuses()] == ["loading", "serving"]
        assert answer_all(pool.routed(), 4) == [0] * 4
        reply = [
            *QUESTION,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": "Sure?"},
        ]
        second = recorder.chat("s", reply, tools=None, n=1, rollout_args={})[0]
        assert not load.gates[0].is_set() and roll.is_alive()
        assert second.model_version == 0
        # The session's record continues its first turn's exact tokens, though another engine sampled it.
        (branch,) = recorder._sessions["s"].branches
        assert branch.tokens[: len(first.prompt_token_ids) + len(first.token_ids)].tolist() == (
            first.prompt_token_ids + first.token_ids
        )
        assert second.prompt_token_ids[: len(first.prompt_token_ids)] == first.prompt_token_ids

        load.gates[0].set()
        assert load.started[1].wait(20)
        # Now engine 1 loads: engine 0 answers with the new weights, the session back on its home.
        assert [s["status"] for s in pool.statuses()] == ["serving", "loading"]
        assert answer_all(pool.routed(), 4) == [1] * 4
        third = recorder.chat(
            "s",
            [*reply, {"role": "assistant", "content": second.content}, {"role": "user", "content": "Why?"}],
            tools=None,
            n=1,
            rollout_args={},
        )[0]
        assert third.model_version == 1
        load.gates[1].set()
        roll.join(timeout=20)
    finally:
        for gate in load.gates:
            gate.set()
        for wrapper in wrappers:
            wrapper.close()
    assert not roll.is_alive()
    assert [s["status"] for s in pool.statuses()] == ["serving", "serving"]
    assert [engine.version() for engine in fresh] == [1, 1] and pool.version() == 1
    name, tensor = next(iter(weights.items()))
    assert all(torch.equal(engine.model.state_dict()[name], tensor) for engine in fresh)


def test_a_single_engine_pauses_the_requests_it_gets_while_it_loads(fresh):
    pool = EnginePool(fresh[:1], min_running=1)
    load = GatedLoad(pool, new_weights(fresh[0]), version=1)
    roll = threading.Thread(target=pool.roll, args=(1, load))
    roll.start()
    with ThreadPoolExecutor(1) as threads:
        assert load.started[0].wait(20)
        assert pool.in_rotation() == [0]  # min_running == engine_num: nothing leaves the rotation
        waiting = threads.submit(pool.routed().generate, [[1, 2, 3]], PARAMS)
        threading.Event().wait(0.5)
        assert not waiting.done()  # it waits for the load, as a single engine always did
        load.gates[0].set()
        assert waiting.result(timeout=20)[0][0].model_version == 1
    roll.join(timeout=20)
    assert fresh[0].version() == 1


def test_sessions_stay_on_their_home_engine_and_other_calls_go_to_the_least_busy(fresh):
    pool = EnginePool(fresh, min_running=1)
    assert pool._acquire(1, rows=4) == 1  # a home that serves takes its call, busy or not
    assert pool._acquire(1, rows=1) == 1
    assert pool._acquire(None, rows=1) == 0  # 0 rows in flight against 5
    assert [s["rows_in_flight"] for s in pool.statuses()] == [1, 5]


def test_a_health_check_answers_on_a_real_engine_and_fails_past_its_bound(engines):
    assert check_engine(engines[0], timeout=30) is None
    with engines[0]._lock:  # the engine is stuck in another call
        problem = check_engine(engines[0], timeout=0.3)
    assert problem.timed_out
    assert "did not answer within 0.3 s" in problem.cause and "explorer.service_status_check_interval" in problem.cause


def test_a_late_check_takes_out_a_stuck_engine_but_not_a_busy_one(fresh):
    """A check that times out while the engine answers other calls finds it busy, not stuck."""
    pool = EnginePool(fresh, min_running=1)
    checker = HealthChecker(pool, interval=0.3)
    with fresh[0]._lock, fresh[1]._lock:  # both engines held past the check's bound
        answering = threading.Timer(0.1, lambda: pool.call(0, rows=1, work=lambda engine: None))
        answering.start()  # engine 0 answers a call meanwhile; engine 1 answers nothing
        checker.check_now()
        answering.join()
    assert pool.in_rotation() == [0]
    assert "did not answer within 0.3 s" in pool.statuses()[1]["cause"]


@pytest.fixture(scope="module")
def dead_engine(engines, tiny_model_dir):
    """An external engine whose server has gone away: every call raises."""
    with serve_in_thread(engines[1], model_name="policy") as url:
        engine = create_engine(
            "external", model_path=tiny_model_dir, base_url=url, model_name="policy", timeout=5
        )
    engine.client = engine.client.with_options(max_retries=0)
    yield engine
    engine.close()


def test_an_engine_failing_its_check_leaves_the_rotation_and_is_logged(engines, dead_engine, caplog):
    pool = EnginePool([engines[0], dead_engine], min_running=1)
    checker = HealthChecker(pool, interval=2).start()  # the survivor's check is well within 2 s
    try:
        with caplog.at_level(logging.ERROR, logger="trivium.serve"):
            for _ in range(100):
                if pool.statuses()[1]["status"] == "failed":
                    break
                threading.Event().wait(0.1)
    finally:
        checker.stop()
    engine_1 = pool.statuses()[1]
    assert engine_1["status"] == "failed" and "health check raised" in engine_1["cause"]
    assert any("engine 1 left the rotation" in r.getMessage() for r in caplog.records)
    assert pool.failure is None and pool.in_rotation() == [0]
    assert answer_all(pool.routed(), 2) == [engines[0].version()] * 2  # the survivor answers everything


def test_too_few_engines_left_fail_the_pool_naming_the_engines_and_the_key(engines, dead_engine):
    failures = []
    pool = EnginePool([engines[0], dead_engine], min_running=2, on_failure=failures.append)
    HealthChecker(pool, interval=5).check_now()
    assert [type(f) for f in failures] == [TooFewEngines] and pool.failure is failures[0]
    message = str(pool.failure)
    assert "explorer.min_running_model_num=2" in message
    assert "1 of 2 engines left (engine 0)" in message and "engine 1: its health check raised" in message
    assert pool.report()["failure"] == message
    with pytest.raises(TooFewEngines):
        pool.roll(1, lambda engine: pytest.fail("a failed pool loads nothing"))


def test_a_pool_refuses_a_minimum_outside_its_engines(engines):
    with pytest.raises(Exception, match="explorer.min_running_model_num is 3.*engine_num \\(2\\)"):
        EnginePool(engines, min_running=3)
