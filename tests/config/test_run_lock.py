"""Two runs in one run directory: the second is refused naming the first; a dead holder's lock is taken over."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from trivium.config.run_lock import LOCK_FILE, RunDirectoryInUse, run_lock
from trivium.errors import UserError

HOLDER = textwrap.dedent(
    """
    import sys, time
    from trivium.config.run_lock import run_lock
    with run_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(60)
    """
)


@pytest.fixture
def holder(tmp_path):
    """A real second process holding the lock of tmp_path/run."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "run")], stdout=subprocess.PIPE,
                               text=True, env=env)
    try:
        assert process.stdout.readline().strip() == "locked"
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


def test_second_run_is_refused_naming_the_holder(holder, tmp_path):
    with pytest.raises(RunDirectoryInUse) as refused:
        with run_lock(tmp_path / "run"):
            pass
    message = str(refused.value)
    assert f"The run directory {tmp_path / 'run'} is in use by process {holder.pid} on host {socket.gethostname()}" in message
    assert "give this run another `name`" in message


def test_lock_of_a_killed_process_is_taken_over_with_a_warning(holder, tmp_path, caplog):
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with caplog.at_level(logging.WARNING):
        with run_lock(tmp_path / "run") as path:
            assert json.loads(path.read_text())["pid"] == os.getpid()
    assert f"taking over the lock left by process {holder.pid}" in caplog.text
    assert (tmp_path / "run" / LOCK_FILE).read_text() == ""  # released cleanly


def test_lock_is_released_on_exit_and_can_be_taken_again(tmp_path, caplog):
    for _ in range(2):
        with run_lock(tmp_path):
            with pytest.raises(RunDirectoryInUse, match=f"process {os.getpid()}"):
                with run_lock(tmp_path):  # a second holder, even in the same process
                    pass
    assert "taking over" not in caplog.text


def test_unwritable_run_directory_is_a_clear_error(tmp_path):
    # A read-only directory cannot be made for root (the tests may run as root); a path below a
    # regular file fails the same way, with an OSError on creating the lock file.
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    with pytest.raises(UserError, match=rf"Cannot create the lock file {blocker}/run/run.lock: .*must be writable"):
        with run_lock(blocker / "run"):
            pass
