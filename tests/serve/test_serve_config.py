"""What a ``mode: serve`` config needs, what it refuses, and where its API listens."""

import pytest

from trivium.config import ConfigError, load_config_from_dict, resolve, validate
from trivium.config.modes import traits_of
from trivium.runtime.settings import build_run_settings


def serve_config(tiny_model_dir, tmp_path, **sections) -> dict:
    config = {
        "project": "p", "name": "serve", "mode": "serve", "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": tiny_model_dir, "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "buffer": {"batch_size": 2,
                   "trainer_input": {"experience_buffer": {"name": "served", "storage_type": "queue"}}},
        "trainer": {"total_steps": 3},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def checked(data: dict):
    config = resolve(load_config_from_dict(data))
    validate(config)
    return config


def test_serve_explores_by_serving_and_trains_concurrently():
    traits = traits_of("serve")
    assert traits.serves_api and traits.explores and traits.trains and traits.concurrent
    assert not traits.reads_training_tasksets


def test_a_serve_config_needs_no_taskset_and_listens_on_loopback_by_default(tiny_model_dir, tmp_path):
    settings = build_run_settings(checked(serve_config(tiny_model_dir, tmp_path)))
    assert settings.explorer.serve.listen_address == "127.0.0.1" and settings.explorer.serve.port == 8010
    assert settings.explorer.tasksets == () and settings.trainer.total_steps == 3
    assert not settings.placement.uses_ray and settings.sync.method == "memory"


def test_the_serve_address_reaches_the_settings(tiny_model_dir, tmp_path):
    data = serve_config(tiny_model_dir, tmp_path, explorer={"proxy_port": 9123, "listen_address": "0.0.0.0"})
    serve = build_run_settings(checked(data)).explorer.serve
    assert (serve.listen_address, serve.port) == ("0.0.0.0", 9123)


@pytest.mark.parametrize("section, values, key, message", [
    ("cluster", {"placement": "ray"}, "cluster.placement", "set cluster.placement: process"),
    ("algorithm", {"algorithm_type": "sft"}, "algorithm.algorithm_type", "trains on a dataset"),
    ("algorithm", {"algorithm_type": "remax"}, "algorithm.algorithm_type", "greedy rollout of each task"),
    ("synchronizer", {"sync_style": "explorer_driven"}, "synchronizer.sync_style", "use fixed or trainer_driven"),
    ("synchronizer", {"sync_offset": 2}, "synchronizer.sync_offset", "set it to 0"),
])
def test_what_serve_mode_cannot_do_is_refused_naming_the_key(tiny_model_dir, tmp_path, section, values, key, message):
    with pytest.raises(ConfigError) as refused:
        checked(serve_config(tiny_model_dir, tmp_path, **{section: values}))
    assert key in str(refused.value) and message in str(refused.value)


def test_a_file_experience_buffer_is_refused(tiny_model_dir, tmp_path):
    data = serve_config(tiny_model_dir, tmp_path)
    data["buffer"]["trainer_input"]["experience_buffer"] = {"name": "x", "storage_type": "file", "path": str(tmp_path)}
    with pytest.raises(ConfigError, match="buffer.trainer_input.experience_buffer.storage_type"):
        checked(data)


def test_the_serve_example_is_a_valid_serve_run(tiny_model_dir, tmp_path, monkeypatch):
    from pathlib import Path

    from trivium.config.prepare import prepare

    monkeypatch.setenv("TRIVIUM_MODEL_PATH", tiny_model_dir)
    monkeypatch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(tmp_path))
    (stage,) = prepare(str(Path(__file__).resolve().parents[2] / "examples" / "serve.yaml"))
    settings = build_run_settings(stage.config)
    assert settings.traits.serves_api and settings.explorer.serve.listen_address == "127.0.0.1"
    assert settings.trainer.total_steps == 12 and settings.train_batch_size == 32


def test_keys_without_effect_in_the_mode_are_noted(tiny_model_dir, tmp_path):
    data = serve_config(tiny_model_dir, tmp_path, explorer={"proxy_port": 9000})
    data["mode"] = "both"
    data["buffer"]["explorer_input"] = {"taskset": {"name": "t", "path": str(tmp_path), "storage_type": "file"}}
    (tmp_path / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n' * 2)  # one whole step of 2 tasks
    notes = validate(resolve(load_config_from_dict(data)))
    assert any(n.key == "explorer.proxy_port" and "read only by mode: serve" in n.message for n in notes)
    data["mode"] = "serve"
    notes = validate(resolve(load_config_from_dict(data)))
    assert any(n.key == "buffer.explorer_input.tasksets" and "reads no training taskset" in n.message for n in notes)
    assert not any(n.key == "explorer.proxy_port" for n in notes)


def test_an_eval_taskset_with_an_unknown_workflow_is_refused_naming_its_key(tiny_model_dir, tmp_path):
    (tmp_path / "eval.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    eval_taskset = {"name": "held_out", "path": str(tmp_path / "eval.jsonl"), "default_workflow_type": "math_workflw"}
    data = serve_config(tiny_model_dir, tmp_path)
    data["buffer"]["explorer_input"] = {"eval_tasksets": [eval_taskset]}
    with pytest.raises(ConfigError) as refused:
        checked(data)
    assert "buffer.explorer_input.eval_tasksets[0].default_workflow_type" in str(refused.value)
    assert "math_workflow" in str(refused.value)  # the closest registered name


@pytest.mark.parametrize("explorer, key, message", [
    ({"min_running_model_num": 3}, "explorer.min_running_model_num", "between 1 and explorer.rollout_model.engine_num (2)"),
    ({"min_running_model_num": 0}, "explorer.min_running_model_num", "between 1 and explorer.rollout_model.engine_num (2)"),
    ({"service_status_check_interval": 0}, "explorer.service_status_check_interval", "a whole number >= 1"),
])
def test_an_engine_pool_that_cannot_keep_its_minimum_is_refused(tiny_model_dir, tmp_path, explorer, key, message):
    data = serve_config(tiny_model_dir, tmp_path, explorer={"rollout_model": {"engine_num": 2}, **explorer})
    with pytest.raises(ConfigError) as refused:
        checked(data)
    assert key in str(refused.value) and message in str(refused.value)


def test_the_engine_pool_keys_reach_the_settings_and_a_pool_that_cannot_roll_is_noted(tiny_model_dir, tmp_path):
    data = serve_config(tiny_model_dir, tmp_path, explorer={
        "rollout_model": {"engine_num": 2}, "min_running_model_num": 1, "service_status_check_interval": 5})
    config = checked(data)
    serve = build_run_settings(config).explorer.serve
    assert (serve.min_running_engines, serve.status_check_interval) == (1, 5.0)
    assert not any(n.key == "explorer.min_running_model_num" for n in validate(config))
    notes = validate(checked(serve_config(tiny_model_dir, tmp_path)))  # one engine, min_running 1
    (note,) = [n for n in notes if n.key == "explorer.min_running_model_num"]
    assert "each pauses the requests it was given while it loads" in note.message
