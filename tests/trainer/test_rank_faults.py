"""A trainer rank that dies or stops answering ends rank 0's call with ``ComponentDied`` naming
the rank and its pid, within a bound, and leaves no rank process behind.

The first two tests start a real 2-rank trainer (rank 1 a spawned process on this CPU) and
fault rank 1 with signals; the others drive the watch with a plain process or a store alone.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from trivium.errors import ComponentDied
from trivium.sync.collective import free_port
from trivium.trainer.rank_group import RankGroup
from trivium.trainer.rank_launcher import RankLauncher, Rendezvous
from trivium.trainer.rank_watch import Heartbeat, connect_store, heartbeat_key
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences

TIMEOUT = 8.0  # the group's timeout (synchronizer.sync_timeout in a run)


@pytest.fixture
def two_ranks(tiny_model_dir, tmp_path):
    """Rank 0 here and rank 1 in its own process, whatever state a test leaves rank 1 in."""
    settings = TrainerSettings(
        model_path=tiny_model_dir, lr=1e-3, use_dynamic_bsz=False, micro_batch_size=4, data_parallel_size=2,
        collective_timeout=TIMEOUT, loss=LossSettings(policy_loss_fn="ppo", advantage_fn="grpo"),
    )
    trainer = Trainer(settings, run_dir=tmp_path)
    rank_1 = trainer.rank_group.handles[0]
    yield trainer, rank_1
    try:
        if rank_1.is_alive():
            rank_1.kill()  # a stopped rank could not be released
        trainer.close()
    finally:
        rank_1.join(10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rank_killed_mid_step_ends_the_step_naming_its_rank_pid_and_signal(two_ranks):
    trainer, rank_1 = two_ranks
    trainer.train_step(make_experiences(seed=0))  # the two ranks train together first
    os.kill(rank_1.pid, signal.SIGSTOP)  # rank 0's next step then waits for it in a collective...
    killer = threading.Timer(2.0, os.kill, (rank_1.pid, signal.SIGKILL))  # ...when it is killed
    killer.start()
    started = time.monotonic()
    with pytest.raises(ComponentDied) as raised:
        trainer.train_step(make_experiences(seed=1))
    seconds = time.monotonic() - started
    killer.join()
    assert f"trainer rank 1 (pid {rank_1.pid}) died: killed by SIGKILL" in str(raised.value)
    assert "continue_from_checkpoint" in str(raised.value)
    assert 2.0 <= seconds < 8.0, f"the step ended {seconds:.1f} s after it began, the kill came at 2 s"
    # Later calls fail at once with the same message, without waiting on the group.
    started = time.monotonic()
    with pytest.raises(ComponentDied, match=f"trainer rank 1 \\(pid {rank_1.pid}\\) died"):
        trainer.weights_for_sync()
    assert time.monotonic() - started < 1.0
    trainer.close()
    assert rank_1.exitcode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_stopped_rank_is_named_after_the_timeout_and_killed(two_ranks):
    trainer, rank_1 = two_ranks
    os.kill(rank_1.pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(ComponentDied) as raised:
        trainer.train_step(make_experiences(seed=0))
    seconds = time.monotonic() - started
    assert f"trainer rank 1 (pid {rank_1.pid}) stopped answering: no heartbeat for" in str(raised.value)
    assert "synchronizer.sync_timeout is 8 s" in str(raised.value)
    assert TIMEOUT - 1.5 <= seconds < TIMEOUT + 5.0, f"named after {seconds:.1f} s (timeout {TIMEOUT:.0f} s)"
    rank_1.join(5)
    assert rank_1.exitcode == -signal.SIGKILL  # the stopped process was killed, not left behind
    started = time.monotonic()
    trainer.close()
    assert time.monotonic() - started < 5.0


class PlainProcesses(RankLauncher):
    """Ranks that are any command: enough to see what the watch makes of a rank that never joins."""

    def __init__(self, command: list[str]):
        self.command = command
        self.launched: list[subprocess.Popen] = []

    def rendezvous_address(self) -> str:
        return "127.0.0.1"

    def launch(self, rank, rendezvous, follower, follower_args) -> subprocess.Popen:
        self.launched.append(subprocess.Popen(self.command))
        return self.launched[-1]

    def reap(self, handles, *, wait: float) -> None:
        for process in handles:
            process.kill()
            process.wait()

    def exit_status(self, handle) -> str | None:
        return None if handle.poll() is None else f"exited with code {handle.returncode}"

    def process_id(self, handle) -> int:
        return handle.pid


def test_a_rank_that_dies_while_starting_is_named_at_once():
    launcher = PlainProcesses([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    with pytest.raises(ComponentDied, match=r"trainer rank 1 \(pid \d+\) died: exited with code 3"):
        RankGroup.start(world_size=2, device_type="cpu", timeout=60, follower=print, follower_args=(),
                        launcher=launcher)
    assert time.monotonic() - started < 20  # not the 60 s timeout


def test_a_rank_that_never_joins_is_named_at_the_timeout_and_stopped():
    launcher = PlainProcesses([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    not_started = r"trainer rank\(s\) 1 did not start within 2 s \(synchronizer.sync_timeout\)"
    with pytest.raises(ComponentDied, match=not_started):
        RankGroup.start(world_size=2, device_type="cpu", timeout=2, follower=print, follower_args=(),
                        launcher=launcher)
    assert time.monotonic() - started < 10
    assert launcher.launched[0].poll() is not None  # reaped, not left running


def test_a_rank_that_loses_rank_0s_store_gives_up():
    rendezvous = Rendezvous("127.0.0.1", free_port("127.0.0.1"), 2, "cpu", timeout=5)
    store = connect_store(rendezvous, hosts=True)
    lost = threading.Event()
    heartbeat = Heartbeat(rendezvous, 1, on_lost=lambda reason: lost.set())
    try:
        deadline = time.monotonic() + 5
        while store.add(heartbeat_key(1), 0) < 2:  # it beats while rank 0 is there
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.1)
        assert not lost.is_set()
        del store  # rank 0's process, with the store it hosts, is gone
        assert lost.wait(5), "the rank did not notice that rank 0 was gone"
    finally:
        heartbeat.stop()
