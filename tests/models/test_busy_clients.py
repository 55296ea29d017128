"""BusyClients: running workflows minus those waiting on a model."""

import threading
import time

from trivium.models.engine.busy_clients import BusyClients


def test_count_is_running_minus_waiting_and_never_negative():
    busy = BusyClients()
    busy.set_running(3)
    assert busy.count == 3
    with busy.waiting():
        assert busy.count == 2
        with busy.waiting():
            assert busy.count == 1
    assert busy.count == 3
    busy.set_running(0)
    with busy.waiting():  # an abandoned attempt still waiting after its runner moved on
        assert busy.count == 0


def test_wait_until_idle_wakes_when_the_last_busy_caller_waits():
    busy = BusyClients()
    busy.set_running(1)
    entered = threading.Event()
    release = threading.Event()

    def caller():
        time.sleep(0.1)
        with busy.waiting():
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=caller)
    thread.start()
    start = time.perf_counter()
    assert busy.wait_until_idle(timeout=5)
    assert entered.wait(1) and time.perf_counter() - start < 4
    release.set()
    thread.join()


def test_wait_until_idle_gives_up_after_the_timeout():
    busy = BusyClients()
    busy.set_running(2)
    start = time.perf_counter()
    assert not busy.wait_until_idle(timeout=0.05)
    assert time.perf_counter() - start >= 0.05
