"""A trainer rank that dies or stops answering ends rank 0's call with ``ComponentDied`` naming
the rank and its pid, within a bound, and leaves no rank process behind.

The first two tests start a real 2-rank trainer (rank 1 a spawned process on this CPU) and
fault rank 1 with signals; the next ones drive the watch with a plain process or a store
alone. The last ones fault rank 1 of whole ``trivium run`` processes, started alone or by
torchrun, while the trainer waits for experiences: the run must end at once, not at its
next step, with the same message, and leave no process behind.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from trivium.buffer.sql_storage import SQLWriter
from trivium.buffer.sql_store import SqlExperienceStore
from trivium.errors import ComponentDied
from trivium.runtime import stopping
from trivium.sync.collective import free_port
from trivium.trainer.rank_group import RankGroup
from trivium.trainer.rank_launcher import RankLauncher, Rendezvous
from trivium.trainer.rank_watch import Heartbeat, connect_store, ended_on_this_machine, heartbeat_key
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences

TIMEOUT = 8.0  # the group's timeout (synchronizer.sync_timeout in a run)


@pytest.fixture
def two_ranks(tiny_model_dir, tmp_path):
    """Rank 0 here and rank 1 in its own process, whatever state a test leaves rank 1 in."""
    settings = TrainerSettings(
        model_path=tiny_model_dir,
        lr=1e-3,
        use_dynamic_bsz=False,
        micro_batch_size=4,
        data_parallel_size=2,
        collective_timeout=TIMEOUT,
        loss=LossSettings(policy_loss_fn="ppo", advantage_fn="grpo"),
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
def test_a_rank_killed_between_steps_is_named_before_the_next_one_begins(two_ranks):
    # A Ray trainer actor has no stop path to hear of it: the trainer asks before each read.
    trainer, rank_1 = two_ranks
    trainer.raise_if_ranks_lost()  # both alive: nothing to raise
    os.kill(rank_1.pid, signal.SIGKILL)
    started = time.monotonic()
    while trainer.rank_group.watch.failure is None and time.monotonic() - started < 5.0:
        time.sleep(0.05)
    with pytest.raises(ComponentDied, match=f"trainer rank 1 \\(pid {rank_1.pid}\\) died: killed by SIGKILL"):
        trainer.raise_if_ranks_lost()
    assert time.monotonic() - started < 2.0  # the watch looks twice a second


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
        RankGroup.start(
            world_size=2, device_type="cpu", timeout=60, follower=print, follower_args=(), launcher=launcher
        )
    assert time.monotonic() - started < 20  # not the 60 s timeout


def test_a_rank_that_never_joins_is_named_at_the_timeout_and_stopped():
    launcher = PlainProcesses([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    not_started = r"trainer rank\(s\) 1 did not start within 2 s \(synchronizer.sync_timeout\)"
    with pytest.raises(ComponentDied, match=not_started):
        RankGroup.start(
            world_size=2, device_type="cpu", timeout=2, follower=print, follower_args=(), launcher=launcher
        )
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


def test_a_process_of_this_machine_is_seen_ending_with_its_signal_until_reaped():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert ended_on_this_machine(process.pid) is None
    os.kill(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while ended_on_this_machine(process.pid) is None:  # a zombie until its parent (this test) reaps it
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert ended_on_this_machine(process.pid) == "killed by SIGKILL"
    process.wait()
    assert ended_on_this_machine(process.pid) == "its process ended"


def test_a_rank_lost_during_a_run_is_raised_where_the_runs_main_thread_waits():
    lost = ComponentDied("trainer rank 1 (pid 4242) died: killed by SIGKILL")
    try:
        with stopping.stop_on_signals():
            threading.Timer(0.2, stopping.fail_run, (lost,)).start()  # as the watch's thread does
            started = time.monotonic()
            with pytest.raises(ComponentDied) as raised:
                threading.Event().wait(30)  # a wait that polls nothing
            assert raised.value is lost
            assert time.monotonic() - started < 5
            assert stopping.stop_requested()  # the waits that poll a stop end too
            with pytest.raises(ComponentDied):
                stopping.raise_if_failed()
    finally:
        stopping.reset()


# ---------------------------------------------------------------- whole runs, faulted while the trainer waits

# synchronizer.sync_timeout of the runs below: how long a rank may take to start (a spawned
# process imports torch first; torchrun's processes are up before the trainer asks for them) or
# stay silent
STARTING_TIMEOUT, SILENCE_TIMEOUT = 60, 10
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


@pytest.fixture
def waiting_run(tiny_model_dir, tmp_path):
    """A `train` run of 2 FSDP2 ranks on a SQL buffer holding one batch, whose writer (this test)
    never finishes: after its first step the trainer waits for a second batch that never comes."""
    database = str(tmp_path / "buffer.db")
    writer = SQLWriter(SqlExperienceStore(database, "exp"))
    writer.write(make_experiences(num_groups=4, group_size=4))  # one batch: 4 tasks x 4 samples
    config = {
        "project": "faults",
        "name": "run",
        "mode": "train",
        "checkpoint_root_dir": str(tmp_path / "runs"),
        "model": {
            "model_path": tiny_model_dir,
            "max_prompt_tokens": 32,
            "max_response_tokens": 8,
            "max_model_len": 40,
        },
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-4}},
        "buffer": {
            "batch_size": 4,
            "total_steps": 4,
            "trainer_input": {
                "experience_buffer": {
                    "name": "exp",
                    "storage_type": "sql",
                    "path": database,
                    "max_read_timeout": 600,
                }
            },
        },
        "trainer": {
            "trainer_strategy": "fsdp2",
            "data_parallel_size": 2,
            "use_dynamic_bsz": False,
            "ppo_micro_batch_size_per_gpu": 16,
            "save_hf_checkpoint": "never",
        },
    }
    config_path = tmp_path / "config.yaml"
    started: list[subprocess.Popen] = []

    def start(launcher: list[str], *, sync_timeout: float) -> tuple[FaultedRun, Path]:
        config_path.write_text(yaml.safe_dump({**config, "synchronizer": {"sync_timeout": sync_timeout}}))
        command = [*launcher, "-m", "trivium.cli.main", "run", "--config", str(config_path)]
        started.append(
            subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                cwd=tmp_path,
                start_new_session=True,
            )
        )
        return FaultedRun(started[-1]), tmp_path / "runs" / "faults" / "run"

    yield start
    writer.finish()
    for process in started:
        for pid in [process.pid, *descendants(process.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()


class FaultedRun:
    """A started run's stderr, line by line with the moment each came."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append((time.monotonic(), line.rstrip()))

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def rank_1_pid_once_waiting(self, run_dir: Path) -> int:
        """Rank 1's pid, once the ranks trained the one batch and the trainer waits for the next."""
        deadline = time.monotonic() + 300
        log, metrics = run_dir / "log" / "trainer.log", run_dir / "metrics.jsonl"
        while not (metrics.exists() and "actor/pg_loss" in metrics.read_text()):
            assert self.process.poll() is None, f"the run ended early: {self.output()[-3000:]}"
            assert time.monotonic() < deadline, "no trainer step in time"
            time.sleep(0.1)
        time.sleep(1.0)  # the step's bookkeeping done, the trainer waits in its read
        return int(re.search(r"trainer ranks joined: rank 1 pid (\d+)", log.read_text()).group(1))

    def fault(self, pid: int, fault: signal.Signals, *, expected: str | tuple[str, ...], error_within: float) -> None:
        """Send ``fault`` to ``pid``; check the run's error (holding ``expected``, or one of them),
        its exit code, when it came and that no process of the run is left."""
        processes = [self.process.pid, *descendants(self.process.pid)]
        sent = time.monotonic()
        os.kill(pid, fault)
        self.process.wait(timeout=error_within + 60)
        exited = time.monotonic() - sent
        # After its error the process still tears down torch and transformers (seconds on a busy CPU).
        assert exited < error_within + 10, f"the run exited {exited:.1f} s after the {fault.name}"
        self.reader.join(5)
        first = next((i for i, (_, line) in enumerate(self.lines) if line.startswith("error: ")), None)
        assert first is not None, f"no error line: {self.output()[-3000:]}"
        moment, error = self.lines[first]
        alternatives = (expected,) if isinstance(expected, str) else expected
        assert any(text in error for text in alternatives), self.output()[-3000:]
        assert "continue_from_checkpoint" in error, self.output()[-3000:]
        assert moment - sent < error_within, f"the error came {moment - sent:.1f} s after the {fault.name}"
        assert self.process.returncode == 1
        before = "\n".join(line for _, line in self.lines[:first])
        assert "Traceback" not in before, before[-3000:]  # (torchrun's own report may follow the error)
        deadline = time.monotonic() + 5  # helpers (multiprocessing's resource tracker) end just after
        while (
            alive := [p for p in processes if ended_on_this_machine(p) is None]
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive, f"processes {alive} of the run outlived it"


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_rank_killed_while_the_trainer_waits_for_experiences_ends_the_run_at_once(waiting_run):
    run, run_dir = waiting_run([sys.executable], sync_timeout=STARTING_TIMEOUT)
    pid = run.rank_1_pid_once_waiting(run_dir)
    # The watch looks every half second; the run's error must not wait for a next step (none comes).
    run.fault(
        pid,
        signal.SIGKILL,
        expected=f"trainer rank 1 (pid {pid}) died: killed by SIGKILL",
        error_within=0.5 + 1.5,
    )
    assert "Traceback" not in run.output()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_under_torchrun_a_killed_second_process_is_named_by_trivium_before_torchrun_reports(waiting_run):
    run, run_dir = waiting_run(TORCHRUN, sync_timeout=STARTING_TIMEOUT)
    pid = run.rank_1_pid_once_waiting(run_dir)
    # The exit status is read from /proc, where it stays only until torchrun reaps the process;
    # when torchrun is first (one CI run in several), the rank is named without it.
    run.fault(
        pid,
        signal.SIGKILL,
        expected=(
            f"trainer rank 1 (pid {pid}) died: killed by SIGKILL",
            f"trainer rank 1 (pid {pid}) died: its process ended",
        ),
        error_within=0.5 + 1.5,
    )
    # torchrun's agent then reports the same process as the job's first failure.
    report = run.output()
    assert re.search(rf"rank\s*: 1 \(local_rank: 1\)\n\s*exitcode\s*: -9 \(pid: {pid}\)", report), report[
        -3000:
    ]
    assert report.index("error: trainer rank 1") < report.index("ChildFailedError")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_under_torchrun_a_stopped_second_process_is_named_after_the_timeout_and_killed(waiting_run):
    run, run_dir = waiting_run(TORCHRUN, sync_timeout=SILENCE_TIMEOUT)
    pid = run.rank_1_pid_once_waiting(run_dir)
    run.fault(
        pid,
        signal.SIGSTOP,
        expected=f"trainer rank 1 (pid {pid}) stopped answering: no heartbeat for",
        error_within=SILENCE_TIMEOUT + 3,
    )
