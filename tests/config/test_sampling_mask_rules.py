"""trainer.replay_sampling_mask is refused, naming the key and the fix, wherever it cannot apply."""

from __future__ import annotations

import pytest

from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare

REPLAY = {"trainer": {"replay_sampling_mask": True}, "model": {"top_k": 20}}


def error_of(write_config, patch: dict) -> str:
    with pytest.raises(ConfigError) as error:
        prepare(write_config(patch))
    return str(error.value)


def test_replay_with_top_k_on_the_hf_engine_is_accepted(write_config):
    (stage,) = prepare(
        write_config({**REPLAY, "trainer": {"replay_sampling_mask": True, "sampling_mask_max_tokens": 64}})
    )
    assert (
        stage.config.trainer.replay_sampling_mask and stage.config.explorer.rollout_model.engine_type == "hf"
    )


def test_a_top_p_in_a_tasksets_rollout_args_is_truncation_enough(write_config):
    patch = {
        "trainer": {"replay_sampling_mask": True},
        "buffer": {
            "explorer_input": {
                "taskset": {"name": "tasks", "path": "/data/tasks", "rollout_args": {"top_p": 0.9}}
            }
        },
    }
    (stage,) = prepare(write_config(patch))
    assert stage.config.trainer.replay_sampling_mask


@pytest.mark.parametrize("engine_type", ["vllm", "external"])
def test_an_engine_that_cannot_record_the_sets_is_refused_by_name(write_config, engine_type):
    message = error_of(write_config, {**REPLAY, "explorer": {"rollout_model": {"engine_type": engine_type}}})
    assert f"trainer.replay_sampling_mask: the '{engine_type}' rollout engine cannot record" in message


def test_without_truncation_there_is_nothing_to_replay(write_config):
    message = error_of(write_config, {"trainer": {"replay_sampling_mask": True}})
    assert "trainer.replay_sampling_mask: no top-k / top-p truncation is configured" in message


def test_a_repetition_penalty_is_refused(write_config):
    message = error_of(write_config, {**REPLAY, "model": {"top_k": 20, "repetition_penalty": 1.2}})
    assert "model.repetition_penalty: is 1.2" in message


def test_a_dataset_algorithm_is_refused(write_config):
    patch = {
        **REPLAY,
        "mode": "train",
        "algorithm": {"algorithm_type": "sft"},
        "buffer": {
            "trainer_input": {
                "auxiliary_buffers": {"sft_dataset": {"storage_type": "file", "path": "/data/sft"}}
            }
        },
    }
    message = error_of(write_config, patch)
    assert "trainer.replay_sampling_mask: algorithm 'sft' trains on a dataset" in message


def test_serve_mode_is_refused(write_config):
    message = error_of(write_config, {**REPLAY, "mode": "serve"})
    assert "trainer.replay_sampling_mask: mode 'serve'" in message


def test_the_cap_alone_is_refused_and_must_be_positive(write_config):
    message = error_of(write_config, {"trainer": {"sampling_mask_max_tokens": 8}})
    assert "trainer.sampling_mask_max_tokens: is only read with trainer.replay_sampling_mask: true" in message
    message = error_of(
        write_config, {**REPLAY, "trainer": {"replay_sampling_mask": True, "sampling_mask_max_tokens": 0}}
    )
    assert "trainer.sampling_mask_max_tokens: must be at least 1" in message


def test_a_teacher_algorithm_is_refused(write_config):
    message = error_of(
        write_config, {**REPLAY, "algorithm": {"algorithm_type": "on_policy_distill", "repeat_times": 4}}
    )
    assert (
        "trainer.replay_sampling_mask: algorithm 'on_policy_distill' compares the engine's logprobs"
        in message
    )
