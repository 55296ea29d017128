"""No config value is silently ignored.

For every key of the schema, a config that changes only that key must change the typed run
settings the components are built from, or the key must be reported: marked inert in the
schema as unused (then `plan` and `run` list it when set) or unsupported (an error), or consumed before the runtime by a named
step (validation, stage expansion, resolve()'s aliases).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import typing

import pytest

from trivium.config import ConfigError, load_config_from_dict, resolve, validate
from trivium.config.schema import InferenceModelConfig, StorageConfig, TriviumConfig
from trivium.config.unused_keys import unused_key_notes
from trivium.runtime.settings import build_run_settings

# Keys read before the runtime, by the step named.
CONSUMED_BEFORE_THE_RUNTIME = {
    "ignore_validator_suggestions": "validate() returns no suggestions",
    "algorithm.optimizer.warmup_style": "resolve() copies it to lr_scheduler_type",
    "algorithm.optimizer.optimizer_type": "validate() allows adamw and adam, both AdamW",
    "algorithm.optimizer.clip_grad": "resolve() copies it to trainer.grad_clip",
    "trainer.trainer_type": "resolve() reads 'verl' as the built-in trainer",
    "trainer.trainer_config": "resolve() copies its veRL paths to trainer keys; the rest is reported unused",
    "stages": "expand_stages() makes one config per stage",
}
# Keys refused with a clear error when set (not silently accepted).
REFUSED = {
    "trainer.ulysses_sequence_parallel_size",
    "trainer.param_offload", "trainer.optimizer_offload",  # GPU memory offload, refused on a CPU
    "explorer.auxiliary_models[0].engine_num",
}
# A key whose effect needs another key set too: probed with that context.
CONTEXT = {
    "model.external_model.base_url_env": {"model.external_model.enable": True},
    "model.external_model.api_key_env": {"model.external_model.enable": True},
    "model.external_model.model_name": {"model.external_model.enable": True},
    **{f"model.tinker.{key}": {"model.tinker.enable": True}
       for key in ("base_model", "rank", "seed", "train_mlp", "train_attn", "train_unembed")},
    "algorithm.kl_penalty_fn_args": {"algorithm.kl_penalty_fn": "k2"},
    "algorithm.entropy_loss_fn_args": {"algorithm.entropy_loss_fn": "default"},
    "algorithm.sample_strategy_args": {"algorithm.sample_strategy": "staleness_control"},
    "explorer.dynamic_timeout.ratio": {"explorer.dynamic_timeout.enable": True},
    "trainer.sampling_mask_max_tokens": {"trainer.replay_sampling_mask": True, "model.top_k": 5},
    # vLLM's LoRA options apply where the vllm engine serves the trained adapter.
    **{f"model.{key}": {"model.lora_configs": [{"lora_rank": 8}], "explorer.rollout_model.engine_type": "vllm"}
       for key in ("fully_sharded_loras", "max_cpu_loras")},
    # Only a cluster with GPUs has a choice of what to compute on.
    "cluster.compute_device": {"cluster.gpu_per_node": 2, "cluster.placement": "ray"},
    # Where the engines run is a choice on Ray only (in one process they are the explorer's).
    "cluster.engines_in_explorer": {"cluster.placement": "ray"},
}
# Probe values where the generic rule would give an invalid or meaningless one.
PROBES = {
    "algorithm.advantage_fn": "rloo",
    "trainer.trainer_strategy": "none",  # fsdp and fsdp2 are one strategy
    "algorithm.policy_loss_fn": "gspo",
    "algorithm.kl_penalty_fn": "k2",
    "algorithm.kl_loss_fn": "k3",
    "algorithm.entropy_loss_fn": "none",
    "algorithm.sample_strategy": "staleness_control",
    "algorithm.sample_strategy_args": {"max_staleness": 3},
    "algorithm.kl_penalty_fn_args": {"kl_coef": 0.5},
    "algorithm.kl_loss_fn_args": {"kl_coef": 0.5},
    "algorithm.entropy_loss_fn_args": {"entropy_coef": 0.5},
    "algorithm.advantage_fn_args": {"epsilon": 0.5},
    "algorithm.policy_loss_fn_args": {"clip_range": 0.5},
    "model.dtype": "bfloat16",
    "explorer.rollout_model.dtype": "bfloat16",
    "explorer.rollout_model.engine_type": "vllm",
    "explorer.auxiliary_models[0].engine_type": "vllm",  # auto already gives hf on a CPU
    "model.max_model_len": 30,
    "model.max_prompt_tokens": 12,
    "model.max_response_tokens": 6,
    "model.chat_template_path": "/tmp/template.jinja",
    "explorer.env_vars": {"PROBE": "1"},
    "monitor.monitor_args": {"probe": 1},
    "data_processor.experience_pipeline": {"operators": [{"name": "reward_filter"}]},
    "data_processor.task_pipeline": {"operators": [{"name": "pass_rate_filter"}]},
    "buffer.trainer_input.auxiliary_buffers": {"expert": {"storage_type": "file", "path": "/tmp/expert"}},
    "cluster.placement": "ray",
    "cluster.compute_device": "cpu",
    "cluster.engines_in_explorer": False,  # null already runs them in the explorer on a CPU
    "synchronizer.sync_method": "checkpoint",
    "model.lora_configs": [{"lora_rank": 8}],
    "explorer.rollout_model.lora_modules": [{"name": "adapter", "path": "/adapters/a"}],
    "explorer.auxiliary_models[0].lora_modules": [{"name": "adapter", "path": "/adapters/a"}],
    "buffer.explorer_input.taskset.data_selector": {"selector_type": "shuffle"},
    "model.external_model.base_url_env": "PROBE_BASE_URL",
    "model.external_model.api_key_env": "PROBE_API_KEY",
    "explorer.api_key_env": "PROBE_SERVE_API_KEY",
}
# Keys that name an environment variable: the probe sets that variable.
NAMES_AN_ENVIRONMENT_VARIABLE = {
    "model.external_model.base_url_env", "model.external_model.api_key_env", "explorer.api_key_env",
}
CONTAINERS = {  # passed to the buffer package whole: probed through one of their keys below
    "buffer.explorer_input.taskset", "buffer.explorer_input.tasksets", "buffer.explorer_input.eval_tasksets",
    "buffer.trainer_input.experience_buffer", "explorer.auxiliary_models", "service.data_juicer",
}


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_model_dir) -> dict:
    data = tmp_path_factory.mktemp("keys")
    rows = "\n".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1)}) for i in range(8)) + "\n"
    (data / "train.jsonl").write_text(rows)
    (data / "test.jsonl").write_text(rows)
    taskset = {"name": "train", "storage_type": "file", "path": str(data), "split": "train",
               "format": {"prompt_key": "question", "response_key": "answer"}}
    return {
        "project": "p", "name": "n", "mode": "both", "continue_from_checkpoint": True,
        "checkpoint_root_dir": str(tmp_path_factory.mktemp("runs")),
        "model": {"model_path": tiny_model_dir, "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {"batch_size": 2, "total_steps": 3, "explorer_input": {
            "taskset": taskset,
            "eval_tasksets": [{**taskset, "name": "test", "split": "test"}],
        }},
        "explorer": {"auxiliary_models": [{"model_path": tiny_model_dir, "name": "judge"}]},
    }


@pytest.fixture(scope="module")
def loaded(base) -> dict:
    """Loaded (unresolved) configs by probe context; loading is the slow part, so once each."""
    cache: dict = {}

    def load(context: dict) -> TriviumConfig:
        key = repr(sorted(context.items()))
        if key not in cache:
            data = copy.deepcopy(base)
            for path, value in context.items():
                set_path(data, path, value)
            cache[key] = load_config_from_dict(data)
        return cache[key]

    return load


def settings_of(config: TriviumConfig) -> str:
    return repr(build_run_settings(resolve(config)))


def with_value(config: TriviumConfig, base: dict, context: dict, path: str, value) -> TriviumConfig:
    """``config`` with one key changed: in place on a copy for plain values, by reloading otherwise."""
    if isinstance(value, (dict, list)):
        data = copy.deepcopy(base)
        for key, item in {**context, path: value}.items():
            set_path(data, key, item)
        return load_config_from_dict(data)
    config = copy.deepcopy(config)
    *parents, last = path.replace("[0]", ".0").split(".")
    node = config
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else getattr(node, key)
    setattr(node, last, value)
    return config


def leaves(cls: type, prefix: str = ""):
    for field in dataclasses.fields(cls):
        path = prefix + field.name
        factory = field.default_factory
        if factory is not dataclasses.MISSING and dataclasses.is_dataclass(factory):
            yield from leaves(factory, path + ".")
        else:
            yield path, field


def container_leaves():
    """One probe per key of the sections passed whole: a taskset, an auxiliary model."""
    for path, field in leaves(StorageConfig, "buffer.explorer_input.taskset."):
        yield path, field
    for path, field in leaves(InferenceModelConfig, "explorer.auxiliary_models[0]."):
        yield path, field


def get_path(data: dict, path: str):
    for key in path.replace("[0]", ".0").split("."):
        if isinstance(data, list):
            data = data[int(key)]
        elif isinstance(data, dict):
            data = data.get(key)
        else:
            data = getattr(data, key, None)
        if data is None:
            return None
    return data


def set_path(data: dict, path: str, value) -> None:
    keys = path.replace("[0]", ".0").split(".")
    for key in keys[:-1]:
        data = data[int(key)] if isinstance(data, list) else data.setdefault(key, {})
    data[keys[-1]] = value


def probe_value(path: str, field: dataclasses.Field, current):
    if path in PROBES:
        return PROBES[path]
    choices = field.metadata.get("choices")
    if choices:
        return next(choice for choice in choices if choice != current)
    annotation = field.type
    inner = [a for a in typing.get_args(annotation) if a is not type(None)]
    kind = inner[0] if typing.get_origin(annotation) is typing.Union and len(inner) == 1 else annotation
    if kind is bool:
        return not current if current is not None else True
    if kind is int:
        return (current or 2) + 1
    if kind is float:
        return current * 2 if current else 0.5
    if kind is str:
        return f"{current or 'x'}_probe"
    origin = typing.get_origin(kind)
    if origin in (dict, typing.Dict) or kind is typing.Any:
        return {"probe": 1}
    if origin in (list, typing.List):
        return [0.8, 0.95]
    raise AssertionError(f"no probe value for {path} ({annotation}): add one to PROBES")


def probes():
    for path, field in [*leaves(TriviumConfig), *container_leaves()]:
        if field.metadata.get("help", "").startswith("(derived)") or path in CONTAINERS:
            continue
        yield pytest.param(path, field, id=path)


@pytest.mark.parametrize("path, field", list(probes()))
def test_every_key_changes_the_run_settings_or_is_reported(base, loaded, path, field, monkeypatch):
    if path in CONSUMED_BEFORE_THE_RUNTIME:
        return
    if path in NAMES_AN_ENVIRONMENT_VARIABLE:
        monkeypatch.setenv(PROBES[path], "probe")
    context = CONTEXT.get(path, {})
    config = loaded(context)
    before = settings_of(config)
    probed = with_value(config, base, context, path, probe_value(path, field, get_path(resolve(config), path)))
    if path in REFUSED:  # by validation, so `trivium plan` refuses them as `trivium run` does
        with pytest.raises(ConfigError, match=re.escape(path)):
            validate(resolve(probed))
        return
    if field.metadata.get("unsupported"):
        with pytest.raises(ConfigError, match=re.escape(path)):
            validate(resolve(probed))
        return
    if field.metadata.get("unused"):
        reported = [note.key for note in unused_key_notes(resolve(probed))]
        assert path in reported, f"{path} is marked unused but not reported: {reported}"
        return
    assert settings_of(probed) != before, f"{path} changes nothing the components read"


def test_unmapped_trainer_config_entries_are_reported(base):
    from trivium.config import load_config_from_dict

    data = copy.deepcopy(base)
    data["trainer"] = {"trainer_config": {"critic": {"optim": {"lr": 0.25}, "ppo_epochs": 4}, "foo": 1}}
    config = resolve(load_config_from_dict(data))
    assert config.trainer.critic_lr == 0.25
    assert sorted(note.key for note in unused_key_notes(config)) == [
        "trainer.trainer_config.critic.ppo_epochs", "trainer.trainer_config.foo",
    ]


def test_a_loss_agg_mode_in_the_policy_loss_arguments_is_acted_on_or_reported(base):
    """It gives way to algorithm.loss_agg_mode (as in Trinity-RFT): rec is switched to follow that
    mode, which changes its settings; for any loss a differing value is a note of resolve()."""
    from trivium.config import resolve_with_notes

    key = "algorithm.policy_loss_fn_args.loss_agg_mode"
    for algorithm_type, changes_settings in (("grpo", False), ("rec", True)):
        data = copy.deepcopy(base)
        data["algorithm"].update(algorithm_type=algorithm_type, loss_agg_mode="seq-mean-token-mean")
        before = settings_of(load_config_from_dict(data))
        data["algorithm"]["policy_loss_fn_args"] = {"loss_agg_mode": "seq-mean-token-sum"}
        resolved, notes = resolve_with_notes(load_config_from_dict(data))
        assert key in [note.key for note in notes]
        assert (repr(build_run_settings(resolved)) != before) is changes_settings
