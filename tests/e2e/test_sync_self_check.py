"""The logprob self-check: run on the first sync and every self_check_interval-th, and loud when
the engine does not serve what the trainer sent."""

import logging

import pytest

from trivium.cli.main import main
from trivium.models.engine.hf import HFEngine

from .conftest import base_config, read_metrics, write_config


def _checked_syncs(run_dir) -> list[dict]:
    return [r for r in read_metrics(run_dir) if "sync/max_logprob_diff" in r]


@pytest.mark.slow
def test_every_interval_th_sync_is_checked_and_intact_weights_agree(assets, tmp_path):
    config = base_config(assets, tmp_path / "runs", **{"buffer.total_steps": 5, "synchronizer.self_check_interval": 2})
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    checks = _checked_syncs(tmp_path / "runs" / "e2e" / "run")
    # Five syncs; the first, third and fifth are checked.
    assert [c["sync/version"] for c in checks] == [1.0, 3.0, 5.0]
    assert all(c["sync/max_logprob_diff"] < 1e-3 for c in checks)


@pytest.mark.slow
def test_an_engine_that_silently_keeps_its_old_weights_is_reported(assets, tmp_path, monkeypatch, caplog):
    def keeps_old_weights(self, state_dict, version):
        self._version = int(version)  # confirms the version, loads nothing
        return self._version

    monkeypatch.setattr(HFEngine, "update_weights", keeps_old_weights)
    # The untrained model earns no reward, so an entropy bonus is what moves the weights.
    config = base_config(
        assets,
        tmp_path / "runs",
        **{
            "buffer.total_steps": 3,
            "algorithm.optimizer.lr": 1e-2,
            "algorithm.entropy_loss_fn": "default",
            "algorithm.entropy_loss_fn_args": {"entropy_coef": 1.0},
        },
    )
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    (check,) = _checked_syncs(tmp_path / "runs" / "e2e" / "run")  # default interval: the first sync only
    assert check["sync/max_logprob_diff"] > 0.05
    log = (tmp_path / "runs" / "e2e" / "run" / "log" / "explorer.log").read_text()
    assert "WEIGHT SYNC CHECK FAILED at version 1" in log
