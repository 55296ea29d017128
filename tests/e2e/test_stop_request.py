"""A run asked to stop mid-way ends cleanly: final checkpoint at the step it reached, exit 0;
and a run whose trainer is stuck still ends, within sync_timeout plus a step, naming the stuck loop."""

import json
import signal
import subprocess
import sys
import textwrap
import time

from trivium.config.prepare import prepare
from trivium.runtime import stopping
from trivium.runtime.launcher import launch
from trivium.trainer import checkpoint as ckpt

from .conftest import base_config, write_config

STOP_AT = 2


class StopAfterTwoSteps:
    """A monitor plugin, as a user would write one: stops the run once two steps are trained."""

    def __init__(self, *, role: str, **_):
        self.role = role

    def log(self, metrics, step):
        if self.role == "trainer" and step >= STOP_AT:
            stopping.request_stop("enough")

    def close(self):
        pass


def test_request_stop_from_a_monitor_ends_the_run_with_a_final_checkpoint(assets, tmp_path):
    config = base_config(
        assets, tmp_path / "runs",
        **{"buffer.total_steps": 50, "monitor.monitor_type": f"{__name__}:StopAfterTwoSteps"},
    )
    (stage,) = prepare(write_config(tmp_path, config))
    assert launch(stage.config) == 0
    run_dir = tmp_path / "runs" / "e2e" / "run"
    assert ckpt.latest_checkpoint(run_dir) == STOP_AT
    trainer_steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                     if json.loads(line)["role"] == "trainer"]
    assert max(trainer_steps) == STOP_AT


STUCK_TRAINER = textwrap.dedent(
    """
    import time


    class StuckTrainer:
        '''A monitor on which the trainer's first step never returns: the trainer loop hangs mid-step.'''

        def __init__(self, *, role, **_):
            self.role = role

        def log(self, metrics, step):
            if self.role == "trainer" and "trainer/step" in metrics:
                time.sleep(3600)

        def close(self):
            pass
    """
)


def test_sigterm_ends_a_both_run_within_the_bound_even_when_the_trainer_is_stuck(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "stuck.py").write_text(STUCK_TRAINER)
    config = base_config(assets, tmp_path / "runs", mode="both", **{
        "buffer.total_steps": 4, "monitor.monitor_type": "stuck:StuckTrainer", "synchronizer.sync_timeout": 8,
    })
    process = subprocess.Popen(
        [sys.executable, "-m", "trivium.cli.main", "run", "--config", write_config(tmp_path, config),
         "--plugin-dir", str(plugins)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    metrics = tmp_path / "runs" / "e2e" / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and '"role": "trainer"' in metrics.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, "no trainer step in time"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)  # the explorer waits for version 1, the trainer is stuck in step 1
    sent = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    # sync_timeout (8 s) plus the longest step, not a hang: the stuck loop is named.
    assert time.monotonic() - sent < 45
    assert process.returncode == 1
    assert "the trainer loop did not end within" in stderr and "see log/trainer.log" in stderr
