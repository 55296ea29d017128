"""The chaos suite: real runs killed, stopped and faulted, checked against what trivium promises.

Short by default (one SIGKILL per chain, as CI runs it). ``make chaos`` runs the long
version: ``CHAOS_KILLS=5`` kills per chain (20 over the four chains) and writes the table
to ``CHAOS_REPORT`` (``benchmarks/results/chaos.md``).
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import subprocess
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from trivium.runtime import stopping
from trivium.runtime.trained_samples import trained_lineage
from trivium.trainer import checkpoint as ckpt

from .chaos import Report, huge_numbers, kill_and_resume, lineage_problems, run_command
from .conftest import base_config, read_metrics, write_config

KILLS = int(os.environ.get("CHAOS_KILLS", "1"))
# Longer chains for more kills, so that every kill lands before the run ends.
STEPS, BATCH, REPEAT = (10 if KILLS <= 1 else 16), 4, 4
REPORT = Report()


@pytest.fixture(scope="module", autouse=True)
def write_report():
    yield
    path = os.environ.get("CHAOS_REPORT")
    if path and REPORT.rows:
        header = (
            "# Chaos suite\n\nReal `trivium run` processes on this machine's CPU (tiny model, arithmetic "
            f"task, {STEPS} steps of {BATCH} tasks x {REPEAT} samples; the serve scenario {SERVE_STEPS} steps of "
            f"{HONEST_CLIENTS * EPISODES_PER_CLIENT} clients' sessions), faulted as the scenario says. "
            "Written by `make chaos`."
        )
        Path(path).write_text(REPORT.markdown(header=header))


def conclude(scenario: str, injected: str, problems: list[str], detail: str) -> None:
    """One row of the table: ``detail`` when nothing went wrong, else the problems; then the test's verdict."""
    REPORT.add(scenario, injected, not problems, "; ".join(problems) or detail)
    assert not problems, problems


def chain_config(assets, tmp_path: Path, mode: str, storage: str) -> dict:
    config = base_config(assets, tmp_path / "runs", mode=mode, continue_from_checkpoint=True)
    config["buffer"]["total_steps"] = STEPS
    config["trainer"]["save_interval"] = 2
    if mode == "both":
        config["synchronizer"]["sync_offset"] = 1
    buffer = config["buffer"]["trainer_input"]["experience_buffer"]
    if storage == "queue+mirror":
        buffer["path"] = str(tmp_path / "mirror.jsonl")
    else:
        buffer.update(storage_type="sql", path=str(tmp_path / "buffer.db"), max_read_timeout=30)
    return config


@pytest.mark.slow
@pytest.mark.parametrize("mode,storage", [("colocate", "queue+mirror"), ("both", "queue+mirror"),
                                          ("colocate", "sql"), ("both", "sql")])
def test_sigkill_at_random_moments_then_resume_loses_and_repeats_nothing(assets, tmp_path, mode, storage):
    config_path = write_config(tmp_path, chain_config(assets, tmp_path, mode, storage))
    run_dir = tmp_path / "runs" / "e2e" / "run"
    rng = random.Random(f"{mode}/{storage}")
    chain = kill_and_resume(run_command(config_path), run_dir, kills=KILLS, rng=rng, total_steps=STEPS)
    problems = lineage_problems(run_dir, total_steps=STEPS, samples_per_step=BATCH * REPEAT)
    expected_final = list(range((chain.resumed_from or 0) + 1, STEPS + 1))
    if chain.final_returncode != 0:
        problems.append(f"the last start exited {chain.final_returncode}: {chain.final_output[-400:]}")
    if chain.final_steps != expected_final:
        problems.append(f"the last start trained steps {chain.final_steps}, expected {expected_final}")
    killed = ", ".join(f"{k.moment} (trained {k.trained_steps}, checkpoint {k.checkpoint})" for k in chain.kills)
    conclude(
        f"SIGKILL + resume, `{mode}`, {storage}", f"{len(chain.kills)} SIGKILLs", problems,
        f"killed {killed or 'no moment (the run was too quick)'}; every step 1-{STEPS} trained once with a full "
        f"batch, no sample twice, none lost; " + (f"last start trained steps {expected_final[0]}-{STEPS}"
                                                  if expected_final else "the last start had nothing left to train"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_checkpoints_and_exits_130_then_a_resume_finishes(assets, tmp_path, signal_number):
    config = chain_config(assets, tmp_path, "both", "queue+mirror")
    config["buffer"]["total_steps"] = 40
    config["trainer"]["save_interval"] = 0  # only the stop's own checkpoint
    config_path = write_config(tmp_path, config)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    process = subprocess.Popen(run_command(config_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while len(trained_lineage(run_dir)) < 2:
        assert process.poll() is None and time.time() < deadline, "no trainer step in time"
        time.sleep(0.1)
    sent = time.monotonic()
    process.send_signal(signal_number)
    returncode = process.wait(120)
    seconds = time.monotonic() - sent
    stopped_at = max(trained_lineage(run_dir))
    latest = ckpt.latest_checkpoint(run_dir)
    problems = []
    # 130, the shell's code for an interrupted program: a scheduler knows the run is not done.
    if returncode != stopping.INTERRUPTED_EXIT_CODE:
        problems.append(f"exit code {returncode}: {process.stderr.read()[-400:]}")
    if latest != stopped_at:
        problems.append(f"last checkpoint {latest}, last trained step {stopped_at}")
    if seconds > 60:
        problems.append(f"took {seconds:.0f} s to stop")
    config["buffer"]["total_steps"] = stopped_at + 2
    resumed = subprocess.run(run_command(write_config(tmp_path, config)), check=False, capture_output=True, text=True, timeout=300)
    if resumed.returncode != 0 or list(trained_lineage(run_dir)) != list(range(1, stopped_at + 3)):
        problems.append(f"the resume did not train steps {stopped_at + 1}-{stopped_at + 2}: {resumed.stderr[-400:]}")
    name = signal.Signals(signal_number).name
    conclude(
        f"{name} during a `both` run", f"1 {name}", problems,
        f"stopped in {seconds:.1f} s with exit 130 and a checkpoint at its last step "
        f"({stopped_at}); a resume trained the next steps",
    )


FAULTY_PLUGIN = textwrap.dedent(
    """
    import threading
    import time

    from trivium.workflows import WORKFLOWS
    from trivium.workflows.math_workflow import MathWorkflow

    FAULTS = ["raise", "hang", "spin", "nan_reward", "wrong_type", "empty_list", "reward_raises"]
    lock = threading.Lock()
    seen = []


    def fault_of(task):
        # Every third task is faulted on its first attempt, each with the next kind of fault.
        with lock:
            if task.task_id in seen:
                return None
            seen.append(task.task_id)
            index = len(seen) - 1
        return FAULTS[(index // 3) % len(FAULTS)] if index % 3 == 0 else None


    @WORKFLOWS.register("faulty_math")
    class FaultyMath(MathWorkflow):
        def run(self):
            fault = fault_of(self.task)
            if fault == "raise":
                raise RuntimeError("injected: the environment crashed")
            if fault == "hang":
                time.sleep(30)
            if fault == "spin":
                while True:  # burns a core until it is stopped
                    pass
            experiences = super().run()
            if fault == "nan_reward":
                for exp in experiences:
                    exp.reward = float("nan")
            if fault == "wrong_type":
                return "injected: not a list of experiences"
            if fault == "empty_list":
                return []
            if fault == "reward_raises":
                raise ZeroDivisionError("injected: the reward function failed")
            return experiences
    """
)


@pytest.mark.slow
def test_workflow_faults_are_contained_retried_and_counted(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "faulty.py").write_text(FAULTY_PLUGIN)
    config = base_config(assets, tmp_path / "runs", mode="both")
    config["buffer"]["total_steps"] = 6  # 24 tasks: 8 faulted, every kind at least once
    config["buffer"]["explorer_input"]["default_workflow_type"] = "faulty_math"
    config["explorer"].update(max_timeout=5, max_retry_times=1, runner_per_model=4)
    completed = subprocess.run(run_command(write_config(tmp_path, config), "--plugin-dir", str(plugins)),
                               check=False, capture_output=True, text=True, timeout=400)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    problems = []
    if completed.returncode != 0:
        problems.append(f"exit code {completed.returncode}: {completed.stderr[-600:]}")
    records = read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    explorer = [r for r in records if r["role"] == "explorer" and "rollout/retries" in r]
    retries = sum(r["rollout/retries"] for r in explorer)
    timeouts = sum(r["rollout/timeouts"] for r in explorer)
    failed = sum(r["rollout/failed_tasks"] for r in explorer)
    # Retried attempts are logged by the runner that ran them (log/explorer_runner_<n>.log).
    log = "".join(path.read_text() for path in (run_dir / "log").glob("explorer*.log"))
    for seen in ("injected: the environment crashed", "reward is nan", "must return a list of Experience",
                 "no experiences (an empty list)", "injected: the reward function failed", "did not finish within"):
        if seen not in log:
            problems.append(f"the explorer's logs do not mention {seen!r}")
    if "it was stopped" not in log:
        problems.append("the spinning workflow was not stopped")
    if not retries or not timeouts:
        problems.append(f"retries {retries}, timeouts {timeouts}: a fault was not retried or not counted")
    if failed:
        problems.append(f"{failed} tasks failed although each fault happens once and one retry is allowed")
    if len(trained_lineage(run_dir)) != 6:
        problems.append(f"trained {len(trained_lineage(run_dir))} of 6 steps")
    conclude(
        "workflow faults (`both`)",
        "raise, sleep past max_timeout, CPU spin past max_timeout, NaN reward, wrong return type, empty list, reward raising", problems,
        f"each fault contained and retried once ({retries:.0f} retries, {timeouts:.0f} "
        "timeouts counted in metrics, each kind in the explorer's logs, the spinning thread stopped); all 6 steps trained",
    )


@pytest.mark.slow
def test_a_corrupt_latest_checkpoint_is_refused_and_the_previous_one_used(assets, tmp_path):
    config = chain_config(assets, tmp_path, "colocate", "queue+mirror")
    config["buffer"]["total_steps"] = 4
    config_path = write_config(tmp_path, config)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    assert subprocess.run(run_command(config_path), check=False, capture_output=True, timeout=300).returncode == 0
    weights = next((run_dir / "global_step_4" / "actor").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a save cut short
    config["buffer"]["total_steps"] = 6
    resumed = subprocess.run(run_command(write_config(tmp_path, config)), check=False, capture_output=True, text=True, timeout=300)
    log = (run_dir / "log" / "trainer.log").read_text()
    problems = []
    if resumed.returncode != 0:
        problems.append(f"exit code {resumed.returncode}: {resumed.stderr[-400:]}")
    if "skipping checkpoint" not in resumed.stderr + resumed.stdout + log or "resumed the trainer from global_step_2" not in log:
        problems.append("the truncated checkpoint was not reported and skipped")
    if list(trained_lineage(run_dir)) != [1, 2, 3, 4, 5, 6]:
        problems.append(f"trained steps {list(trained_lineage(run_dir))}")
    conclude(
        "corrupt latest checkpoint", "actor weights truncated to half", problems,
        "refused with its reason, resumed from the previous checkpoint (step 2), steps 3-6 trained",
    )


@pytest.mark.slow
def test_a_buffer_database_locked_by_another_writer_slows_the_run_but_loses_nothing(assets, tmp_path):
    import sqlite3

    config = chain_config(assets, tmp_path, "both", "sql")
    config["buffer"]["total_steps"] = 6
    config["continue_from_checkpoint"] = False
    run_dir = tmp_path / "runs" / "e2e" / "run"
    process = subprocess.Popen(run_command(write_config(tmp_path, config)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not trained_lineage(run_dir):
        assert process.poll() is None and time.time() < deadline, "no trainer step in time"
        time.sleep(0.05)
    other = sqlite3.connect(tmp_path / "buffer.db", timeout=30)
    other.execute("BEGIN EXCLUSIVE")  # another program writing: every reader and writer must wait
    time.sleep(5.0)
    other.rollback()
    other.close()
    returncode = process.wait(300)
    problems = lineage_problems(run_dir, total_steps=6, samples_per_step=BATCH * REPEAT)
    if returncode != 0:
        problems.append(f"exit code {returncode}: {process.stderr.read()[-400:]}")
    conclude(
        "buffer database locked (`both`, sql)", "an exclusive SQLite lock held 5 s by another process", problems,
        "the explorer and trainer waited for the lock; all 6 steps trained, no sample lost or twice",
    )


FLAKY_ENGINE_PLUGIN = textwrap.dedent(
    """
    import time

    from trivium.models.engine import ENGINES

    STALL_SYNC_AT_VERSION = int(__import__("os").environ.get("CHAOS_STALL_SYNC_AT", "0"))


    class FlakyEngine:
        '''The hf engine, except that some generate calls raise or stall, and one weight load stalls.'''

        def __init__(self, inner):
            self.inner = inner
            self.calls = self.raised = 0
            self.poisoned = None

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def generate(self, prompts, params):
            self.calls += 1
            # One prompt fails its first two calls: the merged call, then the call the batcher
            # retries it in on its own, so the workflow's attempt sees the error.
            if self.calls == 2:
                self.poisoned = list(prompts[0])
            if self.poisoned in [list(p) for p in prompts] and self.raised < 2:
                self.raised += 1
                raise RuntimeError("injected: CUDA out of memory")
            if self.calls == 6:
                time.sleep(7)  # longer than max_timeout
            return self.inner.generate(prompts, params)

        def update_weights(self, state_dict, version):
            if version == STALL_SYNC_AT_VERSION:
                time.sleep(3600)
            return self.inner.update_weights(state_dict, version)


    def create(model_path=None, **kwargs):
        return FlakyEngine(ENGINES.get("hf")(model_path=model_path, **kwargs))
    """
)


def _flaky_engine_run(assets, tmp_path, *, stall_sync_at: int, steps: int):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "flaky_engine.py").write_text(FLAKY_ENGINE_PLUGIN)
    config = base_config(assets, tmp_path / "runs")
    config["buffer"]["total_steps"] = steps
    config["explorer"].update(max_timeout=5, max_retry_times=2)
    config["explorer"]["rollout_model"] = {"engine_type": "flaky_engine:create"}
    config["synchronizer"]["sync_timeout"] = 5
    env = dict(os.environ, CHAOS_STALL_SYNC_AT=str(stall_sync_at))
    started = time.monotonic()
    completed = subprocess.run(run_command(write_config(tmp_path, config), "--plugin-dir", str(plugins)),
                               check=False, capture_output=True, text=True, timeout=400, env=env)
    return completed, time.monotonic() - started, tmp_path / "runs" / "e2e" / "run"


@pytest.mark.slow
def test_engine_calls_that_raise_or_stall_are_retried_and_the_run_finishes(assets, tmp_path):
    completed, _, run_dir = _flaky_engine_run(assets, tmp_path, stall_sync_at=0, steps=4)
    problems = []
    if completed.returncode != 0:
        problems.append(f"exit code {completed.returncode}: {completed.stderr[-600:]}")
    log = "".join(path.read_text() for path in (run_dir / "log").glob("explorer*.log"))
    if "injected: CUDA out of memory" not in log or "did not finish within" not in log:
        problems.append("the engine's failures are not in the explorer's logs")
    if list(trained_lineage(run_dir)) != [1, 2, 3, 4]:
        problems.append(f"trained steps {list(trained_lineage(run_dir))}")
    conclude(
        "engine faults (`colocate`)", "generate raises twice for one prompt, one call stalls 7 s (max_timeout 5 s)", problems,
        "the failed and timed-out attempts were retried and logged; all 4 steps trained",
    )


@pytest.mark.slow
def test_a_weight_sync_that_stalls_ends_the_run_with_a_message_not_a_hang(assets, tmp_path):
    completed, seconds, _ = _flaky_engine_run(assets, tmp_path, stall_sync_at=2, steps=4)
    problems = []
    if completed.returncode == 0:
        problems.append("the run exited 0")
    message = completed.stderr
    if "weight version 2" not in message or "sync_timeout" not in message or "explorer at step" not in message:
        problems.append(f"the error does not name the version, step and setting: {message[-600:]}")
    conclude(
        "weight sync stalls (`colocate`)", "the engine never confirms version 2 (sync_timeout 5 s)", problems,
        f"stopped after {seconds:.0f} s with exit {completed.returncode}: "
        + next((line for line in message.splitlines() if "weight version 2" in line), "").strip()[:160],
    )


RANK_TIMEOUT = 10  # synchronizer.sync_timeout of the two-rank runs: how long a rank may stay silent


@pytest.fixture
def two_rank_run(assets, tmp_path):
    """A `both` run whose trainer has 2 ranks; whatever the test does, it ends with all its processes."""
    config = base_config(assets, tmp_path / "runs", mode="both")
    config["trainer"].update(trainer_strategy="fsdp2", data_parallel_size=2)
    config["buffer"]["total_steps"] = 40  # far more than the test lets it train
    config["synchronizer"]["sync_timeout"] = RANK_TIMEOUT
    process = subprocess.Popen(run_command(write_config(tmp_path, config)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    yield process, tmp_path / "runs" / "e2e" / "run"
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for pid in _processes_in_group(process.pid):
        os.kill(pid, signal.SIGKILL)


def _processes_in_group(group: int) -> list[int]:
    """Live (not zombie) processes of process group ``group``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            # /proc/<pid>/stat: "pid (name) state ppid pgrp ..."; the name may hold spaces.
            state, _, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError, IndexError):
            continue
        if int(pgrp) == group and state not in "ZX":
            found.append(int(entry.name))
    return found


def _rank_1_pid_after_a_step(process: subprocess.Popen, run_dir: Path) -> int:
    """Rank 1's pid as the trainer logged it, once the two ranks trained a step together."""
    deadline = time.time() + 300
    while True:
        assert process.poll() is None, f"the run ended early: {process.stderr.read()[-600:]}"
        assert time.time() < deadline, "no trainer step in time"
        log = run_dir / "log" / "trainer.log"
        found = re.search(r"trainer ranks joined: rank 1 pid (\d+)", log.read_text() if log.exists() else "")
        if found and trained_lineage(run_dir):
            return int(found.group(1))
        time.sleep(0.1)


def _faulted_rank_run(process: subprocess.Popen, run_dir: Path, fault: signal.Signals, *, bound: float,
                      expected: str) -> tuple[list[str], str]:
    pid = _rank_1_pid_after_a_step(process, run_dir)
    os.kill(pid, fault)
    sent = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=bound + 60)
    except subprocess.TimeoutExpired:
        return [f"the run did not end within {bound + 60:.0f} s of the {fault.name}"], ""
    seconds = time.monotonic() - sent
    error = next((line for line in stderr.splitlines() if line.startswith("error: ")), "")
    problems = []
    if process.returncode == 0:
        problems.append("the run exited 0")
    if seconds > bound:
        problems.append(f"the run took {seconds:.0f} s to end, more than {bound:.0f} s")
    if expected.format(pid=pid) not in error:
        problems.append(f"the error does not name rank 1 and pid {pid}: {error or stderr[-600:]}")
    if "Traceback" in stderr:
        problems.append(f"a traceback was printed: {stderr[-600:]}")
    deadline = time.monotonic() + 5  # the run's helpers (multiprocessing's resource tracker) end just after
    while (survivors := _processes_in_group(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if survivors:
        problems.append(f"processes {survivors} outlived the run")
    first_clause = error.removeprefix("error: ").split("; ")[0].split(". ")[0]
    return problems, f"exit {process.returncode} after {seconds:.0f} s: {first_clause}"


@pytest.mark.slow
def test_a_trainer_rank_killed_mid_run_ends_the_run_naming_it(two_rank_run):
    process, run_dir = two_rank_run
    problems, seen = _faulted_rank_run(process, run_dir, signal.SIGKILL, bound=30,
                                       expected="trainer rank 1 (pid {pid}) died: killed by SIGKILL")
    conclude("trainer rank killed (`both`, 2 FSDP2 ranks)", "SIGKILL to rank 1's process after a step",
             problems, f"{seen}; no process of the run left")


@pytest.mark.slow
def test_a_trainer_rank_stopped_mid_run_ends_the_run_naming_it(two_rank_run):
    process, run_dir = two_rank_run
    problems, seen = _faulted_rank_run(process, run_dir, signal.SIGSTOP, bound=RANK_TIMEOUT + 20,
                                       expected="trainer rank 1 (pid {pid}) stopped answering")
    conclude("trainer rank hangs (`both`, 2 FSDP2 ranks)",
             f"SIGSTOP to rank 1's process after a step (sync_timeout {RANK_TIMEOUT} s)", problems,
             f"{seen}; the stopped rank was killed, no process of the run left")



SERVE_STEPS, HONEST_CLIENTS, EPISODES_PER_CLIENT = 3, 4, 2  # a commit of 8 honest sessions per trainer step
REWARD_RULE = "must be a finite number within ±1e+06 (the rule every reward passes)"
DIGIT_LIMIT = "Exceeds the limit (4300 digits) for integer string conversion"
# What the attacker posts as `reward`, as raw JSON (Python's JSON reader takes NaN and Infinity),
# and what the refusal must say. An integer of more digits than Python reads is refused while
# the body is read, before the reward rule is asked.
REWARD_ATTACKS = {
    "1e308": ("1e308", REWARD_RULE),
    "-1e7": ("-1e7", REWARD_RULE),
    "1e999 (read as inf)": ("1e999", REWARD_RULE),
    "NaN": ("NaN", REWARD_RULE),
    "-Infinity": ("-Infinity", REWARD_RULE),
    '"NaN" as a string': ('"NaN"', REWARD_RULE),
    "a 400-digit integer": ("1" + "0" * 400, REWARD_RULE),
    "a 5000-digit integer": ("9" * 5000, DIGIT_LIMIT),
    "a list": ("[1.0]", REWARD_RULE),
    "true": ("true", REWARD_RULE),
}


def _serve_attack_config(assets, run_root: Path, port: int) -> dict:
    config = base_config(assets, run_root, mode="serve")
    del config["buffer"]["explorer_input"], config["buffer"]["total_steps"]
    batch = HONEST_CLIENTS * EPISODES_PER_CLIENT
    config["buffer"].update(batch_size=HONEST_CLIENTS, train_batch_size=batch)
    config["buffer"]["trainer_input"]["experience_buffer"].update(name="served")
    config["algorithm"].update(repeat_times=EPISODES_PER_CLIENT)
    config["cluster"]["placement"] = "process"
    config["explorer"] = {"proxy_port": port, "listen_address": "127.0.0.1"}
    config["trainer"]["total_steps"] = SERVE_STEPS
    return config


@pytest.fixture
def serve_run(assets, tmp_path):
    """A `trivium run` process in serve mode; whatever the test does, it ends with all its processes."""
    from trivium.models.server import free_port

    port = free_port()
    config_path = write_config(tmp_path, _serve_attack_config(assets, tmp_path / "runs", port))
    process = subprocess.Popen(run_command(config_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, env=dict(os.environ, COLUMNS="200"))
    yield process, f"http://127.0.0.1:{port}", tmp_path / "runs" / "e2e" / "run"
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _wait_until_serving(root: str, process: subprocess.Popen, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the run ended early: {process.communicate()[1][-600:]}"
        try:
            if httpx.get(f"{root}/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("the serve-mode API did not come up")


def _serve_round(root: str, round_index: int, attacks: list[str]) -> tuple[list[str], list[str], dict]:
    """Honest clients play their episodes while the attacker, in sessions of its own, posts ``attacks``;
    then one commit. Returns the problems seen, the attacker's session ids and the commit's answer."""
    import httpx
    import openai

    client = openai.OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    problems: list[str] = []

    def chat(session_id: str, question: str) -> str:
        completion = client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": question}],
            extra_headers={"X-Session-Id": session_id},
        )
        return completion.choices[0].message.content or ""

    def honest(index: int) -> None:
        question = f"What is {round_index} + {index}?"
        for episode in range(EPISODES_PER_CLIENT):
            session_id = f"honest-{round_index}-{index}-{episode}"
            reward = max(0.0, 1.0 - len(chat(session_id, question)) / 24)  # short answers are better
            answer = httpx.post(f"{root}/feedback", json={"session_id": session_id, "reward": reward,
                                                         "group_id": question})
            if answer.status_code != 200:
                problems.append(f"honest feedback refused: {answer.status_code} {answer.text[:200]}")

    def attacker() -> list[str]:
        sessions = []
        for name in attacks:
            session_id = f"attack-{round_index}-{len(sessions)}"
            chat(session_id, "What is 1 + 1?")  # a recorded episode, which a valid reward would train
            reward, expected = REWARD_ATTACKS[name]
            body = f'{{"session_id": "{session_id}", "reward": {reward}}}'
            json_header = {"Content-Type": "application/json"}
            answer = httpx.post(f"{root}/feedback", content=body, headers=json_header)
            message = answer.json().get("error", {}).get("message", "") if answer.status_code != 200 else ""
            if not 400 <= answer.status_code < 500 or expected not in message:
                problems.append(f"reward {name}: {answer.status_code} {answer.text[:200]}")
            sessions.append(session_id)
        return sessions

    with ThreadPoolExecutor(max_workers=HONEST_CLIENTS + 1) as pool:
        attacked = pool.submit(attacker)
        list(pool.map(honest, range(HONEST_CLIENTS)))
        attack_sessions = attacked.result()
    return problems, attack_sessions, httpx.post(f"{root}/commit", json={}).json()


def _wait_for_version(root: str, version: int, process: subprocess.Popen, timeout: float = 120) -> None:
    """Pace the rounds: the next one starts when the weights trained on this one are served."""
    import httpx

    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{root}/health").json()["model_version"] >= version:
                return
        except httpx.TransportError:  # the run trained its last step and stopped serving
            return
        time.sleep(0.1)


@pytest.mark.slow
def test_a_serve_reward_attack_is_refused_while_honest_sessions_train(serve_run):
    process, root, run_dir = serve_run
    _wait_until_serving(root, process)
    problems, attack_sessions = [], []
    names = list(REWARD_ATTACKS)
    for round_index in range(SERVE_STEPS):
        seen, sessions, committed = _serve_round(root, round_index, names[round_index::SERVE_STEPS])
        problems += seen
        attack_sessions += sessions
        if committed.get("sessions") != HONEST_CLIENTS * EPISODES_PER_CLIENT:
            problems.append(f"round {round_index + 1} committed {committed}: expected the honest sessions")
        _wait_for_version(root, round_index + 1, process)
    bound = 60  # the last step trains, the weights load, the run saves and reports
    try:
        stdout, stderr = process.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        stdout, stderr = "", ""
        problems.append(f"the run did not end within {bound} s of the last commit")
    if process.returncode != 0:
        problems.append(f"exit code {process.returncode}: {stderr[-600:]}")
    records = read_metrics(run_dir)
    trainer = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    if [r["step"] for r in trainer] != list(range(1, SERVE_STEPS + 1)):
        problems.append(f"trainer steps {[r['step'] for r in trainer]}, expected 1..{SERVE_STEPS}")
    unfinite = [(r["step"], key) for r in trainer for key in ("actor/pg_loss", "actor/grad_norm")
                if not math.isfinite(r[key])]
    if unfinite:
        problems.append(f"non-finite loss or grad norm at {unfinite}")
    commits = [r for r in records if r["role"] == "explorer" and "serve/sessions" in r]
    rewards = [r[key] for r in commits for key in ("rollout/reward_min", "rollout/reward_max")]
    if len(commits) != SERVE_STEPS or not all(0.0 <= reward <= 1.0 for reward in rewards):
        problems.append(f"{len(commits)} commits logged, rewards {rewards}: expected honest ones in [0, 1]")
    trained_sessions = {task_id for samples in trained_lineage(run_dir).values() for task_id, *_ in samples}
    if trained_sessions & set(attack_sessions):
        problems.append(f"refused sessions trained: {sorted(trained_sessions & set(attack_sessions))}")
    if len(trained_sessions) != SERVE_STEPS * HONEST_CLIENTS * EPISODES_PER_CLIENT:
        problems.append(f"{len(trained_sessions)} honest sessions trained, expected every one")
    summary = stdout[stdout.find("run summary"):]
    huge = huge_numbers(summary)
    if "reward:" not in summary or huge:
        problems.append(f"the summary is missing or shows huge numbers {huge}: {summary[-600:]}")
    conclude(
        "serve-reward attack (`serve`)",
        f"{len(attack_sessions)} /feedback posts among {HONEST_CLIENTS} honest clients' episodes: "
        + ", ".join(REWARD_ATTACKS), problems,
        f"each refused with 400 `{REWARD_RULE}` (the 5000-digit integer: `{DIGIT_LIMIT}`); "
        f"all {SERVE_STEPS} steps trained the honest sessions only, finite loss and grad norm, exit 0, "
        "rewards in metrics within [0, 1], no huge number in the summary",
    )
