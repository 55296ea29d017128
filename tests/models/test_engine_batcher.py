"""RequestBatcher: concurrent requests share engine calls; one bad request fails alone."""

import threading
import time

import pytest

from trivium.errors import UserError
from trivium.models.engine import SamplingParams, create_engine
from trivium.models.engine.batcher import RequestBatcher
from trivium.models.engine.busy_clients import BusyClients


@pytest.fixture(scope="module")
def engine(qwen2_path):
    return create_engine("hf", model_path=qwen2_path, seed=0)


def test_waiting_requests_are_merged_and_a_bad_one_fails_alone(engine):
    batcher = RequestBatcher(engine)
    greedy = SamplingParams(temperature=0, max_tokens=5, min_tokens=5)
    expected = engine.generate([[20, 21, 22]], greedy)[0][0].token_ids
    with engine._lock:  # engine busy: everything submitted now waits for the same batch
        blocker = batcher.submit([[5, 6]], [greedy])
        time.sleep(0.2)  # let the batcher take the blocker and block on the engine lock
        futures = [batcher.submit([[20, 21, 22]], [greedy]) for _ in range(5)]
        bad = batcher.submit([[10**6]], [greedy])
    blocker.result(timeout=60)
    results = [f.result(timeout=60) for f in futures]
    with pytest.raises(UserError, match="token ids outside"):
        bad.result(timeout=60)
    assert all(r[0][0].token_ids == expected for r in results)
    # blocker, one merged try of the six waiting, then six one-by-one retries after the failure
    assert batcher.calls == 1 + 1 + 6
    batcher.close()


def test_merged_requests_without_errors_take_one_call(engine):
    batcher = RequestBatcher(engine)
    params = SamplingParams(max_tokens=4, n=2)
    with engine._lock:
        blocker = batcher.submit([[5, 6]], [params])
        time.sleep(0.2)
        futures = [batcher.submit([[7, 8, 9], [10]], [params, params]) for _ in range(4)]
    blocker.result(timeout=60)
    assert all(len(f.result(timeout=60)) == 2 for f in futures)
    assert batcher.calls == 2
    batcher.close()


def test_park_ends_the_serving_thread_and_the_next_request_starts_another(engine):
    batcher = RequestBatcher(engine)
    params = SamplingParams(max_tokens=3)
    assert len(batcher.submit([[5, 6]], [params]).result(timeout=60)) == 1
    first = batcher._thread
    assert first is not None and first.is_alive()
    batcher.park()
    assert not first.is_alive() and batcher._thread is None
    assert len(batcher.submit([[7, 8]], [params]).result(timeout=60)) == 1
    assert batcher._thread is not None and batcher._thread is not first
    batcher.close()


def test_a_request_queued_while_parking_is_still_served(engine):
    batcher = RequestBatcher(engine)
    params = SamplingParams(max_tokens=3)
    batcher.submit([[5, 6]], [params]).result(timeout=60)
    with engine._lock:  # the serving thread blocks on the engine with a request in hand
        busy = batcher.submit([[5, 6]], [params])
        time.sleep(0.2)
        queued = batcher.submit([[9, 10]], [params])
        batcher._parking = True  # what park() sets before it joins
    assert len(busy.result(timeout=60)) == 1 and len(queued.result(timeout=60)) == 1
    batcher.park()
    assert batcher._thread is None
    batcher.close()


def _staggered_callers(batcher, busy, count, params):
    """``count`` callers that prepare their request for a while (staggered), then wait on it."""
    results = [None] * count

    def caller(i):
        time.sleep(0.02 * i)
        future = batcher.submit([[5 + i, 6]], [params])
        if busy is None:
            results[i] = future.result(timeout=60)
        else:
            with busy.waiting():
                results[i] = future.result(timeout=60)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_an_idle_engine_waits_for_busy_callers_so_their_requests_share_one_call(engine):
    params = SamplingParams(max_tokens=3)
    busy = BusyClients()
    busy.set_running(4)
    gathered = RequestBatcher(engine, busy=busy, max_gather_seconds=5.0)
    assert all(len(r) == 1 for r in _staggered_callers(gathered, busy, 4, params))
    assert gathered.calls == 1
    gathered.close()
    # Without the gauge the first request goes out alone.
    eager = RequestBatcher(engine)
    _staggered_callers(eager, None, 4, params)
    assert eager.calls > 1
    eager.close()


def test_a_caller_that_never_asks_delays_the_others_only_by_the_gather_limit(engine):
    busy = BusyClients()
    busy.set_running(2)  # one caller will never submit
    batcher = RequestBatcher(engine, busy=busy, max_gather_seconds=0.2)
    start = time.perf_counter()
    future = batcher.submit([[5, 6]], [SamplingParams(max_tokens=2)])
    with busy.waiting():
        assert len(future.result(timeout=60)) == 1
    elapsed = time.perf_counter() - start
    assert 0.2 <= elapsed < 30
    batcher.close()
