"""`trivium run` and `trivium init model` started as a user starts them, in a fresh process: at
the default verbosity their console (stdout and stderr) holds trivium's own lines and no
third-party progress bar or warning. (At log.level DEBUG the same run prints transformers'
"Loading weights" and "Writing model shards" bars; tests/runtime/test_quiet_output.py checks
that DEBUG changes nothing.)"""

import os
import subprocess
import sys

import pytest

from trivium.runtime.quiet_output import QUIET_ENVIRONMENT

from .conftest import base_config, write_config

PROGRESS_BARS = ("Loading weights", "Writing model shards", "it/s]", "%|")
WARNINGS = ("FutureWarning", "UserWarning", "DeprecationWarning", "past_key_values")


def console_of(command: list[str]) -> str:
    """stdout and stderr of ``trivium COMMAND`` in a fresh process that inherits no quieting."""
    environment = {name: value for name, value in os.environ.items() if name not in QUIET_ENVIRONMENT}
    environment.pop("PYTHONWARNINGS", None)
    completed = subprocess.run(
        [sys.executable, "-m", "trivium.cli.main", *command],
        env={**environment, "OMP_NUM_THREADS": "1"},
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-3000:]
    return output


def noise_in(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(marker in line for marker in PROGRESS_BARS + WARNINGS)]


@pytest.mark.slow
def test_a_run_at_the_default_verbosity_prints_no_third_party_progress_bars_or_warnings(assets, tmp_path):
    # The run loads the model and exports it, which draws transformers' bars unless they are off.
    config = base_config(assets, tmp_path / "runs", **{"trainer.save_hf_checkpoint": "last"})
    output = console_of(["run", "--config", write_config(tmp_path, config)])
    # trivium's own lines stay.
    assert "progress | explore 2/2" in output and "run summary" in output and "Hugging Face export" in output
    assert noise_in(output) == []


@pytest.mark.slow
def test_building_a_model_prints_no_third_party_progress_bars(tmp_path):
    # Saving the new model draws transformers' "Writing model shards" bar unless it is off.
    output = console_of(["init", "model", "--preset", "tiny", "--out", str(tmp_path / "model")])
    assert "wrote tiny model to" in output
    assert noise_in(output) == []
