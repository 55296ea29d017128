"""The run plan: derived values computed once, the rollout model's overrides, and placement."""

from __future__ import annotations

import pytest

from trivium.config import load_config_from_dict, resolve_with_notes
from trivium.config.modes import EXPLORING_MODES, MODE_TRAITS, TRAINING_MODES
from trivium.runtime.settings import build_run_settings


def config(tmp_path, **sections) -> dict:
    data = {
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": "/models/m", "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {"batch_size": 2, "total_steps": 3},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return data


def settings(tmp_path, **sections):
    resolved, notes = resolve_with_notes(load_config_from_dict(config(tmp_path, **sections)))
    return build_run_settings(resolved), notes


def test_modes_are_defined_once_by_their_traits():
    assert set(EXPLORING_MODES) == {"colocate", "both", "explore", "bench", "serve"}
    assert set(TRAINING_MODES) == {"colocate", "both", "train", "serve"}
    assert [mode for mode, traits in MODE_TRAITS.items() if traits.concurrent] == ["both", "serve"]
    assert [mode for mode, traits in MODE_TRAITS.items() if traits.serves_api] == ["serve"]


def test_rollout_model_overrides_reach_the_wrapper_and_engine(tmp_path):
    run, _ = settings(
        tmp_path,
        explorer={"rollout_model": {"max_prompt_tokens": 12, "max_response_tokens": 4, "enable_thinking": True,
                                    "max_model_len": 20}},
    )
    wrapper, engine = run.explorer.wrapper, run.explorer.rollout
    assert (wrapper.max_prompt_tokens, wrapper.max_response_tokens, wrapper.enable_thinking) == (12, 4, True)
    assert wrapper.max_model_len == engine.max_model_len == 20
    assert run.trainer.max_token_len_per_gpu == 16384  # from model.max_model_len (24), not the engine's


def test_without_overrides_the_rollout_model_takes_the_model_limits(tmp_path):
    run, _ = settings(tmp_path)
    assert (run.explorer.wrapper.max_prompt_tokens, run.explorer.wrapper.max_response_tokens) == (16, 8)
    assert run.explorer.rollout.max_model_len == 24


def test_a_named_kl_loss_without_a_coefficient_gets_the_default_once(tmp_path):
    run, _ = settings(tmp_path, algorithm={"kl_loss_fn": "k3"})
    assert (run.trainer.loss.kl_loss_fn, run.trainer.loss.kl_loss_coef) == ("k3", 0.001)
    run, _ = settings(tmp_path, algorithm={"kl_loss_fn": "none"})
    assert run.trainer.loss.kl_loss_coef == 0.0


def test_the_verl_trainer_config_paths_become_trainer_keys(tmp_path):
    run, notes = settings(tmp_path, trainer={"trainer_config": {
        "critic": {"optim": {"lr": 2e-5}, "cliprange_value": 0.2},
        "actor_rollout_ref": {"model": {"enable_gradient_checkpointing": True, "use_remove_padding": True}},
        "old_logprobs_source": "recompute",
    }})
    trainer = run.trainer
    assert (trainer.critic_lr, trainer.cliprange_value, trainer.gradient_checkpointing) == (2e-5, 0.2, True)
    assert trainer.pack_sequences
    assert trainer.old_logprobs_source == "recompute"
    assert any(n.key == "trainer.trainer_config.critic.optim.lr" for n in notes)


def test_an_invalid_old_logprobs_source_names_the_key_the_user_wrote(tmp_path):
    from trivium.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.trainer_config.old_logprobs_source"):
        settings(tmp_path, trainer={"trainer_config": {"old_logprobs_source": "magic"}})


def test_both_on_one_cpu_in_process_splits_the_cores(tmp_path):
    run, _ = settings(tmp_path)
    assert not run.placement.uses_ray and run.sync.method == "memory"
    assert run.trainer.cpu_threads and run.explorer.rollout.compute_threads


@pytest.mark.parametrize("mode", ["both", "explore", "train"])
def test_placement_ray_moves_weights_by_broadcast_or_checkpoint(tmp_path, mode):
    data = config(tmp_path, cluster={"placement": "ray"})
    data["mode"] = mode
    if mode == "train":
        data["buffer"]["trainer_input"] = {"experience_buffer": {"name": "exp", "storage_type": "sql", "path": str(tmp_path / "e.db")}}
    resolved, notes = resolve_with_notes(load_config_from_dict(data))
    run = build_run_settings(resolved)
    assert run.placement.uses_ray
    assert run.sync.method == ("nccl" if mode == "both" else "checkpoint")
    # Components in their own processes get no shared-CPU thread split.
    if run.trainer is not None:
        assert run.trainer.cpu_threads is None


def test_memory_sync_on_ray_is_replaced_with_a_note(tmp_path):
    run, notes = settings(tmp_path, cluster={"placement": "ray"}, synchronizer={"sync_method": "memory"})
    assert run.sync.method == "nccl"
    assert any(n.key == "synchronizer.sync_method" and "broadcast" in n.message for n in notes)


def test_auto_placement_joins_a_cluster_named_by_ray_address(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    run, _ = settings(tmp_path)
    assert run.placement.uses_ray and run.placement.ray_address == "127.0.0.1:6379"


def test_colocate_stays_in_process_and_says_so(tmp_path):
    data = config(tmp_path, cluster={"placement": "ray"})
    data["mode"] = "colocate"
    resolved, notes = resolve_with_notes(load_config_from_dict(data))
    assert not build_run_settings(resolved).placement.uses_ray
    assert any(n.key == "cluster.placement" for n in notes)


def test_lora_configs_become_the_trainers_adapter_settings(tmp_path):
    adapter = {"lora_rank": 8, "lora_alpha": 16, "lora_dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}
    run, _ = settings(tmp_path, model={"lora_configs": [adapter]})
    lora = run.trainer.lora
    assert (lora.rank, lora.alpha, lora.dropout, lora.target_modules) == (8, 16.0, 0.1, ("q_proj", "v_proj"))
    assert not lora.sync_merged, "the hf engine applies adapters sent alone"
    from trivium.config.unused_keys import unused_key_notes

    resolved = resolve_with_notes(load_config_from_dict(config(tmp_path, model={"lora_configs": [{"name": "policy"}]})))[0]
    assert [note.key for note in unused_key_notes(resolved)] == ["model.lora_configs[0].name"]  # listed by `plan`
    run, _ = settings(tmp_path, model={"lora_configs": [adapter]}, explorer={"rollout_model": {"engine_type": "vllm"}})
    assert not run.trainer.lora.sync_merged, "vLLM serves the adapter sent alone as a LoRA adapter"
    run, _ = settings(tmp_path, model={"lora_configs": [adapter]}, explorer={"rollout_model": {"engine_type": "external"}})
    assert run.trainer.lora.sync_merged, "engines without adapter support get W + B @ A"
    assert settings(tmp_path)[0].trainer.lora is None


@pytest.mark.parametrize("adapter, words", [
    ({"lora_rank": 0}, "lora_rank: must be >= 1"),
    ({"lora_dtype": "int8"}, "lora_dtype: is 'int8'"),
    ({"lora_dropout": 1.0}, "lora_dropout: must be in [0, 1)"),
    ({"target_modules": []}, "target_modules: must be 'all-linear' or a list"),
])
def test_bad_lora_settings_name_the_key(tmp_path, adapter, words):
    """Refused by validation (config/trainer_rules.py), so `trivium plan` names them too."""
    from trivium.config import ConfigError, validate

    taskset = {"explorer_input": {"taskset": {"name": "t", "path": "/data/t"}}}
    resolved = resolve_with_notes(load_config_from_dict(config(tmp_path, model={"lora_configs": [adapter]}, buffer=taskset)))[0]
    with pytest.raises(ConfigError, match=r"model\.lora_configs\[0\]\.") as error:
        validate(resolved)
    assert words in str(error.value)
