"""The disk failing under a running run: one message naming the path and the intact
checkpoint, no traceback, and the run resumes once the directory is fixed."""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from .conftest import base_config, read_metrics, write_config

SETPRIV = shutil.which("setpriv")
# Root writes through permissions; without these capabilities its processes obey them.
WITHOUT_ROOT_OVERRIDES = [SETPRIV or "setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0 and SETPRIV is None, reason="as root, setpriv (util-linux) is needed to obey permissions")
# The run directory itself (new checkpoints, the explorer's position), or the audit trail of trained samples.
@pytest.mark.parametrize("read_only", [".", "log/trained_samples.jsonl"])
def test_a_run_directory_made_read_only_mid_run_ends_with_a_message_and_resumes(assets, tmp_path, read_only):
    config = base_config(assets, tmp_path / "runs", continue_from_checkpoint=True)
    config["buffer"]["total_steps"] = 6
    config["trainer"]["save_interval"] = 1
    run_dir = tmp_path / "runs" / "e2e" / "run"
    prefix = WITHOUT_ROOT_OVERRIDES if os.geteuid() == 0 else []
    command = [*prefix, sys.executable, "-m", "trivium.cli.main", "run", "--config", write_config(tmp_path, config)]

    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not (run_dir / "global_step_2" / "actor" / "trainer_state.json").exists():
        assert first.poll() is None, first.stderr.read()[-2000:]
        assert time.time() < deadline, "no checkpoint appeared in time"
        time.sleep(0.05)
    target = run_dir / read_only
    mode = target.stat().st_mode
    target.chmod(0o555 if target.is_dir() else 0o444)
    try:
        _, stderr = first.communicate(timeout=120)
    finally:
        target.chmod(mode)

    assert first.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    message = next(line for line in stderr.splitlines() if line.startswith("error: "))
    assert f"the run could not write {run_dir}" in message and "Permission denied" in message
    assert f"The run directory {run_dir} must stay writable" in message
    intact = int(re.search(r"checkpoint global_step_(\d+) is intact", message).group(1))
    assert 2 <= intact < 6

    second = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resumed the trainer from global_step_{intact}" in (run_dir / "log" / "trainer.log").read_text()
    trainer_steps = [r["step"] for r in read_metrics(run_dir) if r["role"] == "trainer" and "actor/pg_loss" in r]
    assert trainer_steps[-(6 - intact):] == list(range(intact + 1, 7))


@pytest.fixture
def small_disk(tmp_path):
    """A 12 MB tmpfs: room for the run's first checkpoints, not for all of them."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs needs root: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@pytest.mark.slow
def test_a_full_disk_mid_run_ends_with_a_message_naming_the_file(assets, tmp_path, small_disk):
    config = base_config(assets, small_disk / "runs", continue_from_checkpoint=True)
    config["buffer"]["total_steps"] = 8
    config["trainer"]["save_interval"] = 1
    run_dir = small_disk / "runs" / "e2e" / "run"
    command = [sys.executable, "-m", "trivium.cli.main", "run", "--config", write_config(tmp_path, config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    message = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert f"the run could not write {run_dir}" in message and "No space left on device" in message
    assert "free space on its disk, or move checkpoint_root_dir" in message
    assert re.search(r"(checkpoint global_step_\d+ is intact|No checkpoint was saved yet)", message)
