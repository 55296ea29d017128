"""A run asked to stop mid-way ends cleanly: final checkpoint at the step it reached, exit 0."""

import json

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
