"""Loading: interpolation, environment variables, overrides, the upper-level mapping and precedence."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

from trivium.config.errors import ConfigError
from trivium.config.load import check_key_path, load_config, load_config_from_dict, parse_override
from trivium.config.resolve import resolve_with_notes
from trivium.config.schema import StorageConfig, TriviumConfig
from trivium.config.typecheck import build_dataclass


def test_defaults_and_interpolation(write_config, monkeypatch):
    monkeypatch.setenv("TRIVIUM_TEST_ROOT", "/runs")
    path = write_config({
        "checkpoint_root_dir": "${oc.env:TRIVIUM_TEST_ROOT,./checkpoints}",
        "model": {"critic_model_path": "${model.model_path}"},
        "buffer": {"total_steps": "${oc.env:TRIVIUM_TEST_STEPS,7}"},
    })
    config = load_config(path)
    assert isinstance(config, TriviumConfig)
    assert config.checkpoint_root_dir == "/runs"
    assert config.model.critic_model_path == "/models/tiny"
    assert config.buffer.total_steps == 7  # env default "7" converted to the schema's int
    assert config.seed == 42 and config.mode == "both" and config.algorithm.optimizer.lr == 1e-6


def test_overrides_reach_nested_lists_and_interpolations(write_config):
    path = write_config({"model": {"critic_model_path": "${model.model_path}"},
                         "buffer": {"explorer_input": {"taskset": None, "tasksets": [{"name": "a", "path": "/a"}]}}})
    config = load_config(path, [
        "algorithm.repeat_times=8",
        "buffer.explorer_input.tasksets[0].path=/data/x",
        "model.model_path=/models/other",
        "+explorer.env_vars.TOKENIZERS_PARALLELISM=false",
        "algorithm.optimizer.betas=[0.8,0.95]",
        "algorithm.optimizer.lr=3e-6",
    ])
    assert config.algorithm.repeat_times == 8
    assert config.buffer.explorer_input.tasksets[0].path == "/data/x"
    assert config.model.critic_model_path == "/models/other"  # interpolation sees the override
    assert config.explorer.env_vars == {"TOKENIZERS_PARALLELISM": "false"}
    assert config.algorithm.optimizer.betas == [0.8, 0.95]
    assert config.algorithm.optimizer.lr == pytest.approx(3e-6)


def test_parse_override_values():
    assert parse_override("a.b=8") == ("a.b", 8)
    assert parse_override("a.b=1e-6")[1] == pytest.approx(1e-6)
    assert parse_override("a=null") == ("a", None)
    assert parse_override("a=x=y") == ("a", "x=y")
    assert parse_override("++a.b=[1, 2]") == ("a.b", [1, 2])


def test_check_key_path_follows_lists_and_named_buffers():
    assert check_key_path("buffer.explorer_input.tasksets[2].format.prompt_key") is None
    assert check_key_path("buffer.trainer_input.auxiliary_buffers.sft.path") is None
    assert check_key_path("trainer.trainer_config.actor.anything") is None  # open mapping
    assert "Did you mean 'buffer.trainer_input.auxiliary_buffers.sft.path'" in \
        check_key_path("buffer.trainer_input.auxiliary_buffers.sft.pth")


def test_choices_are_case_insensitive_and_normalized(write_config):
    config = load_config(write_config({"log": {"level": "debug"}}))
    assert config.log.level == "DEBUG"


def test_warmup_style_is_a_deprecated_alias(write_config):
    config = load_config(write_config({"algorithm": {"optimizer": {"warmup_style": "cosine"}}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resolved, notes = resolve_with_notes(config)
    assert resolved.algorithm.optimizer.lr_scheduler_type == "cosine"
    assert resolved.algorithm.optimizer.warmup_style is None
    assert any(note.kind == "deprecated" for note in notes)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def _upper_files(tmp_path):
    upper = {
        "tuner": {"group": 4, "lr": 2e-6, "model": "/models/from-tuner", "batch": 6},
        "trivium": {
            "model": {"max_prompt_tokens": 32, "max_response_tokens": 32},
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 5},  # wins over the mapped group size
            "cluster": {"gpu_per_node": 0},
            "buffer": {"explorer_input": {"taskset": {"name": "t", "path": "/t"}}},
        },
    }
    mapping = {"tuner.group": "algorithm.repeat_times", "tuner.lr": "algorithm.optimizer.lr",
               "tuner.model": "model.model_path", "tuner.batch": ["buffer.batch_size", "buffer.train_batch_size"]}
    (tmp_path / "upper.yaml").write_text(yaml.safe_dump(upper))
    (tmp_path / "map.json").write_text(json.dumps(mapping))
    return tmp_path / "upper.yaml", tmp_path / "map.json"


def _plain_paths(upper: dict, mapping: dict) -> dict:
    """A minimal mapping function: dotted source path -> dotted target path(s)."""
    result: dict = {}
    for source, targets in mapping.items():
        value = upper
        for part in source.split("."):
            value = value[part]
        for target in [targets] if isinstance(targets, str) else targets:
            node = result
            *parents, leaf = target.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
    return result


@pytest.mark.parametrize("mapping_fn", [_plain_paths, None], ids=["plain-paths", "interop-mapping"])
def test_precedence_defaults_mapping_passthrough_overrides(tmp_path, mapping_fn):
    upper, mapping = _upper_files(tmp_path)
    config = load_config(upper, ["buffer.batch_size=3"], mapping=mapping, mapping_fn=mapping_fn)
    assert config.model.model_path == "/models/from-tuner"  # mapped (nothing above it)
    assert config.algorithm.optimizer.lr == pytest.approx(2e-6)  # mapped over the default
    assert config.algorithm.repeat_times == 5  # passthrough over mapped
    assert config.buffer.train_batch_size == 6  # mapped
    assert config.buffer.batch_size == 3  # command line over mapped
    assert config.algorithm.optimizer.weight_decay == 0.01  # schema default


def test_passthrough_without_mapping_ignores_the_upper_keys(tmp_path):
    upper, _ = _upper_files(tmp_path)
    config = load_config(upper, ["model.model_path=/m"])
    assert config.algorithm.repeat_times == 5 and config.buffer.batch_size == 1


def test_load_from_dict_and_structured_defaults():
    config = load_config_from_dict({"buffer": {"trainer_input": {"auxiliary_buffers": {"sft": {"path": "/d"}}}}})
    assert isinstance(config.buffer.trainer_input.auxiliary_buffers["sft"], StorageConfig)
    assert config.buffer.trainer_input.auxiliary_buffers["sft"].split == "train"


def test_list_items_become_sections_with_schema_typed_defaults():
    config = load_config_from_dict({"buffer": {"explorer_input": {"eval_tasksets": [{"name": "test", "path": "/t"}]}}})
    (taskset,) = config.buffer.explorer_input.eval_tasksets
    assert isinstance(taskset, StorageConfig) and taskset.path == "/t"
    # The schema writes this default as 1800; a float field holds a float, given or not.
    assert taskset.max_read_timeout == 1800.0 and isinstance(taskset.max_read_timeout, float)


def test_built_config_shares_no_containers_with_its_data():
    data = {"explorer": {"env_vars": {"A": "1"}}, "buffer": {"explorer_input": {"eval_tasksets": [{"name": "e"}]}}}
    config = build_dataclass(TriviumConfig, data)
    config.explorer.env_vars["B"] = "2"
    config.buffer.explorer_input.eval_tasksets[0].name = "changed"
    assert data == {"explorer": {"env_vars": {"A": "1"}}, "buffer": {"explorer_input": {"eval_tasksets": [{"name": "e"}]}}}


def test_building_from_unchecked_data_names_the_key():
    with pytest.raises(ConfigError, match=r"buffer\.explorer_input\.eval_tasksets\[0\]\.pth: unknown key 'pth'\. "
                                          r"Did you mean 'buffer\.explorer_input\.eval_tasksets\[0\]\.path'\?"):
        build_dataclass(TriviumConfig, {"buffer": {"explorer_input": {"eval_tasksets": [{"pth": "/t"}]}}})
    with pytest.raises(ConfigError, match=r"buffer\.batch_size: expected an integer, got 'many'"):
        build_dataclass(TriviumConfig, {"buffer": {"batch_size": "many"}})
