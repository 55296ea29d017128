"""A run's console shows trivium's own lines: no third-party progress bars or FutureWarnings at the
default verbosity, and the progress bars back at log.level DEBUG."""

import pytest

from trivium.cli.main import main

from .conftest import base_config, write_config

THIRD_PARTY = ("Loading weights", "Writing model shards", "FutureWarning", "past_key_values")


@pytest.mark.slow
def test_a_run_prints_no_third_party_progress_bars_or_warnings(assets, tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    config = base_config(assets, tmp_path / "runs", **{"trainer.save_hf_checkpoint": "last"})
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    output = "\n".join(capfd.readouterr())
    assert "run summary" in output and "progress | explore 2/2" in output  # trivium's own lines stay
    assert not [marker for marker in THIRD_PARTY if marker in output], output[-3000:]
