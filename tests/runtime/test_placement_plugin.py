"""A placement is a module of its own, named in the config: a plugin placement runs a whole ``both`` run."""

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import base_config, read_metrics, write_config
from trivium.cli.main import main
from trivium.data.builder import build_task_data

PLUGIN_DIR = Path(__file__).parent / "placement_plugin"


@pytest.mark.slow
def test_a_plugin_placement_builds_both_sides_and_the_run_trains_and_syncs_through_it(
    tmp_path, tiny_model_dir
):
    data = build_task_data("arithmetic", tmp_path / "data", seed=0, num_train=16, num_test=4)
    config = base_config(
        {"model": tiny_model_dir, "data": str(data)},
        tmp_path / "runs",
        **{
            "mode": "both",
            "cluster.placement": "recording_placement:RecordingPlacement",
            "buffer.total_steps": 2,
        },
    )
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(PLUGIN_DIR)]) == 0

    run_dir = tmp_path / "runs" / "e2e" / "run"
    record = json.loads((run_dir / "placement_record.json").read_text())
    assert record == {
        "built": ["TrainerWorker", "ExplorerWorker"],
        "transport": "memory",
        "placed": True,
        "engines": 1,
    }
    metrics = read_metrics(run_dir)
    trained = [row["step"] for row in metrics if "actor/pg_loss" in row]
    served = [row["explorer/model_version"] for row in metrics if "explorer/model_version" in row]
    assert trained[-1] == 2
    assert max(served) >= 1, "the explorer served weights the trainer published through the placement's sides"
