"""Stopping a run between steps: by a plugin's request or by Ctrl-C / SIGTERM."""

import os
import signal

import pytest

from trivium.runtime import stopping


@pytest.fixture(autouse=True)
def clean_state():
    stopping.reset()
    yield
    stopping.reset()


def test_a_programmatic_stop_is_recorded_with_its_reason_and_exits_zero():
    assert not stopping.stop_requested()
    stopping.request_stop("target reached")
    stopping.request_stop("a later reason does not replace the first")
    assert stopping.stop_requested()
    assert stopping.stop_reason() == "target reached"
    assert stopping.exit_code() == 0


def test_first_signal_requests_a_stop_and_the_second_interrupts():
    previous = signal.getsignal(signal.SIGINT)
    with stopping.stop_on_signals():
        os.kill(os.getpid(), signal.SIGINT)
        assert stopping.stop_requested()
        assert "SIGINT" in stopping.stop_reason()
        assert stopping.exit_code() == stopping.INTERRUPTED_EXIT_CODE
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is previous


def test_sigterm_also_stops_gracefully():
    with stopping.stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        assert stopping.stop_requested() and "SIGTERM" in stopping.stop_reason()
