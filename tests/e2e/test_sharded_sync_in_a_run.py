"""A run whose trainer is sharded over 2 ranks syncs by checkpoint bucket by bucket, and the
explorer logs what the trainer wrote with each version."""

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config


@pytest.mark.slow
def test_checkpoint_sync_from_two_ranks_logs_its_buckets(assets, tmp_path):
    config = base_config(
        assets,
        tmp_path / "runs",
        mode="both",
        **{
            "trainer.trainer_strategy": "fsdp2",
            "trainer.data_parallel_size": 2,
            "synchronizer.sync_method": "checkpoint",
            "buffer.total_steps": 3,
        },
    )
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    syncs = [r for r in read_metrics(tmp_path / "runs" / "e2e" / "run") if "sync/buckets" in r]
    assert syncs, "the explorer logs the trainer's bucket count with each loaded version"
    for record in syncs:
        # The tiny model is far below one 256 MB bucket: one file holds all of it.
        assert record["sync/buckets"] == 1
        assert record["sync/largest_bucket_bytes"] == record["sync/bytes"] > 0
