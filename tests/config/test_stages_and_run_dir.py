"""Stages inherit and override sections; run directories, timestamps and config.resolved.yaml."""

from __future__ import annotations

import pytest

from tests.config.conftest import patched
from trivium.config.errors import ConfigError
from trivium.config.load import load_config, load_config_from_dict
from trivium.config.resolve import resolve
from trivium.config.run_dir import RESOLVED_FILE, choose_run_name, write_resolved
from trivium.config.stages import expand_stages, latest_weights_dir, use_previous_stage_weights
from trivium.errors import UserError

STAGED = {
    "algorithm": {"optimizer": {"lr": 5e-6}},
    "stages": [
        {"stage_name": "warmup", "mode": "train", "algorithm": {"algorithm_type": "sft", "repeat_times": 1},
         "buffer": {"trainer_input": {"experience_buffer": {"storage_type": "file", "path": "/sft"}}}},
        {"stage_name": "rl", "explorer": {"eval_interval": 3}},
        {"stage_name": "rl2", "model": {"model_path": "/models/chosen"}},
    ],
}


def test_stages_inherit_override_and_chain(tmp_path):
    config = load_config_from_dict(patched({**STAGED, "checkpoint_root_dir": str(tmp_path)}))
    warmup, rl, rl2 = expand_stages(config)
    assert [c.stage_index for c in (warmup, rl, rl2)] == [0, 1, 2]
    assert (warmup.mode, warmup.algorithm.algorithm_type) == ("train", "sft")
    assert warmup.algorithm.optimizer.lr == 5e-6  # untouched keys of an overridden section stay
    assert (rl.mode, rl.algorithm.algorithm_type, rl.explorer.eval_interval) == ("both", "grpo", 3)
    assert rl.name == "unit/rl" and rl.checkpoint_job_dir == str(tmp_path / "demo" / "unit" / "rl")
    assert rl.previous_stage_job_dir == warmup.checkpoint_job_dir
    assert rl2.previous_stage_job_dir is None  # it names its own model
    assert all(c.stages == [] for c in (warmup, rl, rl2))
    assert resolve(rl).checkpoint_job_dir == rl.checkpoint_job_dir


def test_no_stages_is_one_config():
    config = load_config_from_dict(patched({}))
    (only,) = expand_stages(config)
    assert only == config and only is not config and only.stage_index is None


def test_previous_stage_weights_are_found(tmp_path):
    config = load_config_from_dict(patched({**STAGED, "checkpoint_root_dir": str(tmp_path)}))
    warmup, rl, _ = [resolve(c) for c in expand_stages(config)]
    with pytest.raises(ConfigError, match="no model export was found"):
        use_previous_stage_weights(rl)
    for step in (2, 10):
        export = tmp_path / "demo" / "unit" / "warmup" / f"global_step_{step}" / "actor" / "huggingface"
        export.mkdir(parents=True)
        (export / "config.json").write_text("{}")
    assert latest_weights_dir(warmup.checkpoint_job_dir).parent.parent.name == "global_step_10"
    started = use_previous_stage_weights(rl)
    assert started.model.model_path.endswith("global_step_10/actor/huggingface")
    assert started.explorer.rollout_model.model_path == started.model.model_path
    assert rl.model.model_path == "/models/tiny"  # the input is untouched


def test_used_directory_gets_a_timestamp_when_not_continuing(tmp_path):
    fresh = load_config_from_dict(patched({"checkpoint_root_dir": str(tmp_path), "continue_from_checkpoint": False}))
    assert choose_run_name(fresh) == "unit"
    (tmp_path / "demo" / "unit").mkdir(parents=True)
    assert choose_run_name(fresh) == "unit"  # empty directory: reuse it
    (tmp_path / "demo" / "unit" / "metrics.jsonl").write_text("{}\n")
    stamped = choose_run_name(fresh, now=0)
    assert stamped.startswith("unit_") and len(stamped) == len("unit_") + 14
    resolved = resolve(fresh)
    assert resolved.name.startswith("unit_") and resolved.checkpoint_job_dir.endswith(resolved.name)
    fresh.continue_from_checkpoint = True
    assert choose_run_name(fresh) == "unit"


def test_written_resolved_config_reloads_to_the_same_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = resolve(load_config_from_dict(patched({"checkpoint_root_dir": str(tmp_path / "ck"),
                                                    "trainer": {"trainer_config": {"critic": {"lr": 1e-5}}}})))
    path = write_resolved(config)
    assert path == tmp_path / "ck" / "demo" / "unit" / RESOLVED_FILE
    reloaded = load_config(path)
    assert reloaded == config
    assert resolve(reloaded) == config


def test_unwritable_run_directory_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a_file"  # a path below a regular file cannot be created, even by root
    blocker.write_text("")
    config = resolve(load_config_from_dict(patched({"checkpoint_root_dir": str(blocker)})))
    with pytest.raises(UserError, match=rf"Cannot write the run directory {blocker}/demo/unit: .*must be writable"):
        write_resolved(config)
