"""A run started by torchrun: rank 0 runs it, the other process is the second rank of each
stage's trainer, and every process exits when the run ends."""

import subprocess
import sys

import pytest

from .conftest import base_config, read_metrics, write_config


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_torchrun_processes_are_the_trainer_ranks_of_every_stage(assets, tmp_path):
    config = base_config(
        assets,
        tmp_path / "runs",
        **{"trainer.trainer_strategy": "fsdp2", "trainer.data_parallel_size": 2, "trainer.save_interval": 2},
    )
    config["stages"] = [{"stage_name": "first"}, {"stage_name": "second"}]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "trivium.cli.main", "run", "--config", write_config(tmp_path, config),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=540, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for stage in ("first", "second"):
        run_dir = tmp_path / "runs" / "e2e" / f"run/{stage}"
        sharded = run_dir / "global_step_2" / "actor" / "sharded"
        # Each of the two processes wrote its own shard files of the trainer's state.
        assert (sharded / ".metadata").is_file()
        assert sorted(path.name for path in sharded.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
        trained = [r for r in read_metrics(run_dir) if r.get("role") == "trainer" and "actor/pg_loss" in r]
        assert [r["step"] for r in trained] == [1, 2]
