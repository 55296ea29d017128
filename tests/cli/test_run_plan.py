"""The ``trivium run`` and ``trivium plan`` commands."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from trivium.cli.main import main

FIXTURES = Path(__file__).parents[1] / "config" / "fixtures"
GOOD = {
    "project": "demo", "name": "cli",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
    "model": {"model_path": "/models/tiny", "max_prompt_tokens": 16, "max_response_tokens": 16},
    "cluster": {"gpu_per_node": 0},
    "buffer": {"batch_size": 2, "explorer_input": {"taskset": {"name": "t", "path": "/data/t"}}},
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_prints_the_grpo_example_arithmetic(workdir, capsys):
    assert main(["plan", "--config", str(FIXTURES / "seed002_grpo.yaml")]) == 0
    out = capsys.readouterr()
    assert "256 tasks × 8 repeats = 2,048 experiences per step" in out.out
    assert "explorer: 2 = 1 engine(s) × 2 tensor-parallel" in out.out and "trainer: 6 (the rest)" in out.out
    assert "2048 experiences do not split evenly over 6 trainer GPUs" in out.err


def test_plan_accepts_overrides_and_warns_on_imbalance(workdir, capsys):
    config = write(workdir / "run.yaml", GOOD)
    assert main(["plan", "--config", str(config), "buffer.total_steps=89", "buffer.batch_size=8",
                 "buffer.train_batch_size=264"]) == 0
    out = capsys.readouterr().out
    assert "explorer 89 steps × 8 tasks × 4 repeats = 2,848 samples; trainer 10 steps × 264 = 2,640 samples" in out
    assert "Set buffer.train_batch_size: 32" in out
    assert not (workdir / "checkpoints").exists()  # plan never writes


def test_bad_config_exits_2_without_traceback(workdir):
    bad = write(workdir / "bad.yaml", {**GOOD, "algorithm": {"algorithm_type": "grpo", "repeat_time": 4}})
    result = subprocess.run([sys.executable, "-m", "trivium.cli.main", "run", "--config", str(bad)],
                            capture_output=True, text=True, cwd=workdir, timeout=120)
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr and "Did you mean 'algorithm.repeat_times'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("command", ["run", "plan"])
def test_config_errors_are_printed_by_main(workdir, capsys, command):
    bad = write(workdir / "bad.yaml", {**GOOD, "mode": "sideways"})
    assert main([command, "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "mode: invalid value 'sideways'" in err and "Traceback" not in err


def test_run_checks_every_stage_before_launching(workdir, monkeypatch, capsys):
    launched = []
    launcher = types.ModuleType("trivium.runtime.launcher")
    launcher.launch = lambda config: launched.append(config) or 0
    monkeypatch.setitem(sys.modules, "trivium.runtime.launcher", launcher)
    staged = write(workdir / "staged.yaml", {**GOOD, "stages": [
        {"stage_name": "one"}, {"stage_name": "two", "algorithm": {"repeat_times": 1}}]})
    assert main(["run", "--config", str(staged)]) == 2
    assert launched == [] and "in stage 'two'" in capsys.readouterr().err


def test_run_writes_resolved_configs_loads_plugins_and_launches(workdir, monkeypatch, capsys):
    launched = []
    launcher = types.ModuleType("trivium.runtime.launcher")
    launcher.launch = lambda config: launched.append(config) or 0
    monkeypatch.setitem(sys.modules, "trivium.runtime.launcher", launcher)
    plugins = workdir / "plugins"
    plugins.mkdir()
    (plugins / "cli_test_plugin.py").write_text("import os\nos.environ['TRIVIUM_CLI_TEST_PLUGIN'] = 'loaded'\n")
    monkeypatch.delenv("TRIVIUM_CLI_TEST_PLUGIN", raising=False)
    config = write(workdir / "run.yaml", GOOD)
    assert main(["run", "--config", str(config), "--plugin-dir", str(plugins), "algorithm.repeat_times=2"]) == 0
    (started,) = launched
    assert started.algorithm.repeat_times == 2 and started.buffer.train_batch_size == 4
    resolved_file = workdir / "checkpoints" / "demo" / "cli" / "config.resolved.yaml"
    assert yaml.safe_load(resolved_file.read_text())["buffer"]["train_batch_size"] == 4
    import os

    assert os.environ["TRIVIUM_CLI_TEST_PLUGIN"] == "loaded"
    sys.modules.pop("trivium_plugin_cli_test_plugin", None)


def test_missing_plugin_dir_is_a_user_error(workdir, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "trivium.runtime.launcher", types.ModuleType("trivium.runtime.launcher"))
    config = write(workdir / "run.yaml", GOOD)
    assert main(["run", "--config", str(config), "--plugin-dir", str(workdir / "nope")]) == 2
    assert "plugin directory not found" in capsys.readouterr().err


def test_help_and_version(capsys):
    for argv in (["--help"], ["run", "--help"], ["plan", "--help"], ["--version"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--plugin-dir" in out and "key=value" in out and "trivium 0.1.0" in out


def test_rank_zero_under_torchrun_refuses_more_trainer_ranks_than_processes(workdir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "trivium.runtime.launcher", types.ModuleType("trivium.runtime.launcher"))
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(name, value)
    config = write(workdir / "run.yaml", {**GOOD, "trainer": {"trainer_strategy": "fsdp2", "data_parallel_size": 4}})
    assert main(["run", "--config", str(config)]) == 2
    assert "trainer.data_parallel_size is 4 but torchrun started 2 processes" in capsys.readouterr().err
    assert not (workdir / "checkpoints").exists()
