"""Every malformed config gives a ConfigError whose message names the key and the fix."""

from __future__ import annotations

import pytest

from tests.config.conftest import DELETE
from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare

TASKSET = {"name": "tasks", "path": "/data/tasks"}
SFT_TRAIN = {"mode": "train", "algorithm": {"algorithm_type": "sft", "repeat_times": 1}}

# (id, patch over the base config, command-line overrides, substrings the message must contain)
CASES = [
    ("unknown-top-level", {"algoritm": {}}, [], ["config.yaml", "unknown key 'algoritm'", "Did you mean 'algorithm'"]),
    ("unknown-nested", {"algorithm": {"repeat_time": 4}}, [], ["algorithm.repeat_time", "Did you mean 'algorithm.repeat_times'"]),
    ("key-in-wrong-section", {"repeat_times": 4}, [], ["unknown key 'repeat_times'", "Did you mean 'algorithm.repeat_times'"]),
    ("unknown-in-list-item",
     {"buffer": {"explorer_input": {"taskset": None, "tasksets": [{"name": "a", "pth": "/x"}]}}}, [],
     ["buffer.explorer_input.tasksets[0].pth", "Did you mean 'buffer.explorer_input.tasksets[0].path'"]),
    ("unknown-in-auxiliary-buffer",
     {"buffer": {"trainer_input": {"auxiliary_buffers": {"sft": {"path": "/d", "storagetype": "file"}}}}}, [],
     ["buffer.trainer_input.auxiliary_buffers.sft.storagetype", "storage_type"]),
    ("unknown-override", {}, ["model.max_model_length=10"], ["command-line override", "Did you mean 'model.max_model_len'"]),
    ("int-type", {"algorithm": {"repeat_times": "eight"}}, [], ["algorithm.repeat_times", "expected an integer", "'eight'"]),
    ("bool-type", {"continue_from_checkpoint": "maybe"}, [], ["continue_from_checkpoint", "expected true/false", "'maybe'"]),
    ("float-type", {"algorithm": {"optimizer": {"lr": "fast"}}}, [], ["algorithm.optimizer.lr", "expected a number", "'fast'"]),
    ("section-as-scalar", {"model": 5}, [], ["model: expected a mapping (section)", "got 5"]),
    ("list-expected", {"buffer": {"explorer_input": {"eval_tasksets": {"name": "e"}}}}, [],
     ["buffer.explorer_input.eval_tasksets", "expected a list"]),
    ("override-type", {}, ["buffer.batch_size=lots"], ["buffer.batch_size", "expected an integer", "'lots'"]),
    ("missing-model-path", {"model": {"model_path": None}}, [], ["model.model_path", "is required", "model.model_path="]),
    ("choice-mode", {"mode": "train_only"}, [], ["mode", "'train_only'", "both, train, explore, bench, colocate"]),
    ("choice-algorithm", {"algorithm": {"algorithm_type": "grpoo"}}, [], ["algorithm.algorithm_type", "Did you mean 'grpo'"]),
    ("choice-scheduler", {"algorithm": {"optimizer": {"lr_scheduler_type": "linear"}}}, [], ["lr_scheduler_type", "constant, cosine"]),
    ("choice-warmup-style", {"algorithm": {"optimizer": {"warmup_style": "step"}}}, [], ["warmup_style", "constant, cosine"]),
    ("choice-storage", {"buffer": {"explorer_input": {"taskset": {"storage_type": "s3"}}}}, [], ["taskset.storage_type", "file, queue, sql"]),
    ("choice-prompt-type", {"buffer": {"explorer_input": {"taskset": {"format": {"prompt_type": "chat"}}}}}, [],
     ["format.prompt_type", "plaintext, messages"]),
    ("choice-selector", {"buffer": {"explorer_input": {"taskset": {"task_selector": {"selector_type": "ordered"}}}}}, [],
     ["task_selector.selector_type", "sequential, shuffle, random, difficulty"]),
    ("choice-engine", {"explorer": {"rollout_model": {"engine_type": "sglang"}}}, [], ["rollout_model.engine_type", "hf, vllm, external"]),
    ("choice-concurrency", {"explorer": {"concurrent_mode": "parallel"}}, [], ["explorer.concurrent_mode", "multi-threading"]),
    ("choice-sync-method", {"synchronizer": {"sync_method": "rdma"}}, [], ["synchronizer.sync_method", "nccl, memory, checkpoint"]),
    ("choice-sync-style", {"synchronizer": {"sync_style": "free"}}, [], ["synchronizer.sync_style", "explorer_driven, trainer_driven"]),
    ("choice-monitor", {"monitor": {"monitor_type": "neptune"}}, [], ["monitor.monitor_type", "none, tensorboard, wandb, mlflow"]),
    ("choice-hf-save", {"trainer": {"save_hf_checkpoint": "sometimes"}}, [], ["trainer.save_hf_checkpoint", "last, always, never"]),
    ("choice-loss-agg", {"algorithm": {"loss_agg_mode": "mean"}}, [], ["algorithm.loss_agg_mode", "token-mean"]),
    ("choice-optimizer", {"algorithm": {"optimizer": {"optimizer_type": "sgd"}}}, [], ["algorithm.optimizer.optimizer_type", "adamw, adam"]),
    ("choice-strategy", {"trainer": {"trainer_strategy": "deepspeed"}}, [], ["trainer.trainer_strategy", "fsdp, fsdp2"]),
    ("choice-log-level", {"log": {"level": "VERBOSE"}}, [], ["log.level", "DEBUG, INFO, WARNING, ERROR"]),
    ("choice-sample-strategy", {"algorithm": {"sample_strategy": "random"}}, [], ["algorithm.sample_strategy", "staleness_control"]),
    ("choice-dtype", {"model": {"dtype": "float8"}}, [], ["model.dtype", "float32, bfloat16, float16, auto"]),
    ("choice-in-stage", {"stages": [{"stage_name": "a", "mode": "fast"}]}, [], ["stages[0].mode", "'fast'"]),
    ("tokens-exceed-model-len", {"model": {"max_model_len": 100}}, [],
     ["model.max_prompt_tokens (64) + model.max_response_tokens (64) = 128", "exceeds model.max_model_len (100)"]),
    ("model-len-underivable", {"model": {"max_response_tokens": None}}, [],
     ["model.max_model_len", "cannot be derived", "max_prompt_tokens and model.max_response_tokens"]),
    ("min-response-too-large", {"model": {"min_response_tokens": 64}}, [], ["model.min_response_tokens", "less than model.max_response_tokens (64)"]),
    ("group-preset-needs-repeats", {"algorithm": {"repeat_times": 1}}, [], ["algorithm.repeat_times", "grpo", "repeat_times >= 2"]),
    ("sft-outside-train", {"algorithm": {"algorithm_type": "sft"}}, [], ["mode", "'sft'", "only with mode: train (got mode: both)"]),
    ("dpo-in-explore", {"mode": "explore", "algorithm": {"algorithm_type": "dpo"}}, [], ["'dpo'", "(got mode: explore)"]),
    ("sft-without-dataset", SFT_TRAIN, [], ["buffer.trainer_input.experience_buffer", "set storage_type: file", "path"]),
    ("devices-exhausted", {"cluster": {"gpu_per_node": 2}, "explorer": {"rollout_model": {"engine_num": 2}}}, [],
     ["cluster", "use 2 of the cluster's 2 GPUs", "leaving none for the trainer"]),
    ("devices-exceeded-explore", {"mode": "explore", "cluster": {"gpu_per_node": 2},
                                  "explorer": {"rollout_model": {"engine_num": 3}}}, [], ["need 3 GPUs but the cluster has 2"]),
    ("tp-spans-nodes", {"cluster": {"node_num": 2, "gpu_per_node": 2}, "explorer": {"rollout_model": {"tensor_parallel_size": 3}}},
     [], ["explorer.rollout_model.tensor_parallel_size", "(3) exceeds cluster.gpu_per_node (2)"]),
    ("colocate-many-engines", {"mode": "colocate", "cluster": {"gpu_per_node": 1}, "explorer": {"rollout_model": {"engine_num": 2}}},
     [], ["colocate shares one device"]),
    ("vllm-on-cpu", {"explorer": {"rollout_model": {"engine_type": "vllm"}}}, [], ["explorer.rollout_model.engine_type", "vllm needs a GPU"]),
    ("over-rollout-needs-dynamic-sync", {"explorer": {"over_rollout": {"ratio": 0.5}}}, [], ["explorer.over_rollout.ratio", "sync_style"]),
    ("fully-async-needs-both", {"mode": "colocate", "synchronizer": {"sync_style": "fully_async"}}, [],
     ["synchronizer.sync_style", "fully_async", "mode 'colocate'"]),
    ("decoupled-needs-a-loss-that-scales", {"algorithm": {"policy_loss_fn": "gspo"}, "trainer": {"old_logprobs_source": "decoupled"}},
     [], ["trainer.old_logprobs_source", "'gspo'", "ppo"]),
    ("decoupled-cap-positive", {"trainer": {"old_logprobs_source": "decoupled", "behaviour_weight_cap": 0}}, [],
     ["trainer.behaviour_weight_cap", "greater than 0"]),
    ("batch-size-zero", {"buffer": {"batch_size": 0}}, [], ["buffer.batch_size: must be at least 1, got 0"]),
    ("sync-interval-zero", {"synchronizer": {"sync_interval": 0}}, [], ["synchronizer.sync_interval: must be at least 1"]),
    ("sync-offset-negative", {"synchronizer": {"sync_offset": -1}}, [], ["synchronizer.sync_offset: must be at least 0"]),
    ("gpu-count-negative", {"cluster": {"gpu_per_node": -1}}, [], ["cluster.gpu_per_node: must be at least 0"]),
    ("taskset-without-path", {"buffer": {"explorer_input": {"taskset": {"path": None}}}}, [],
     ["buffer.explorer_input.tasksets[0].path", "needs a path"]),
    ("no-taskset-when-exploring", {"buffer": {"explorer_input": {"taskset": None}}}, [], ["buffer.explorer_input.tasksets", "needs a training taskset"]),
    ("bench-without-eval", {"mode": "bench"}, [], ["buffer.explorer_input.eval_tasksets", "bench mode"]),
    ("duplicate-taskset-names", {"buffer": {"explorer_input": {"taskset": None, "tasksets": [TASKSET, TASKSET]}}}, [],
     ["tasksets[1].name", "'tasks' is already used by buffer.explorer_input.tasksets[0]"]),
    ("eval-taskset-queue", {"buffer": {"explorer_input": {"eval_tasksets": [{"name": "e", "storage_type": "queue"}]}}}, [],
     ["eval_tasksets[0].storage_type", "not a queue"]),
    ("file-experience-buffer-in-both", {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": "file", "path": "/x"}}}},
     [], ["experience_buffer.storage_type", "'file' is for inspecting", "'queue' or 'sql'"]),
    ("replay-on-sql", {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": "sql", "path": "/x.db",
                                                                          "replay_buffer": {"enable": True}}}}}, [],
     ["replay_buffer.enable", "only with storage_type: queue"]),
    ("taskset-and-tasksets-differ", {"buffer": {"explorer_input": {"tasksets": [{"name": "other", "path": "/o"}]}}}, [],
     ["buffer.explorer_input.taskset", "not both"]),
    ("top-p-range", {"model": {"top_p": 1.5}}, [], ["model.top_p: must be in (0, 1], got 1.5"]),
    ("top-k-zero", {"model": {"top_k": 0}}, [], ["model.top_k", "-1 (off)"]),
    ("temperature-negative", {"model": {"temperature": -1}}, [], ["model.temperature: must be at least 0"]),
    ("taskset-top-p", {"buffer": {"explorer_input": {"taskset": {"rollout_args": {"top_p": 0}}}}}, [], ["tasksets[0].rollout_args.top_p"]),
    ("memory-fraction", {"explorer": {"rollout_model": {"gpu_memory_utilization": 1.2}}}, [],
     ["explorer.rollout_model.gpu_memory_utilization: must be in (0, 1]"]),
    ("tensor-parallel-zero", {"explorer": {"auxiliary_models": [{"model_path": "/j", "tensor_parallel_size": 0}]}}, [],
     ["explorer.auxiliary_models[0].tensor_parallel_size: must be at least 1"]),
    ("aux-without-path", {"explorer": {"auxiliary_models": [{"engine_num": 1}]}}, [], ["explorer.auxiliary_models[0].model_path"]),
    ("betas-length", {"algorithm": {"optimizer": {"betas": [0.9]}}}, [], ["algorithm.optimizer.betas", "two numbers"]),
    ("warmup-ratio", {"algorithm": {"optimizer": {"lr_warmup_steps_ratio": 1.5}}}, [], ["lr_warmup_steps_ratio: must be in [0, 1]"]),
    ("two-lora-adapters", {"model": {"lora_configs": [{"name": "a"}, {"name": "b"}]}}, [], ["model.lora_configs", "one adapter"]),
    ("external-without-name", {"explorer": {"rollout_model": {"engine_type": "external"}}}, [], ["model.external_model.model_name"]),
    ("megatron", {"trainer": {"trainer_strategy": "megatron"}}, [], ["trainer.trainer_strategy", "fsdp or fsdp2"]),
    ("missing-env-var", {"model": {"model_path": "${oc.env:TRIVIUM_SURELY_UNSET_VAR}"}}, [],
     ["model.model_path", "environment variable TRIVIUM_SURELY_UNSET_VAR is not set", "${oc.env:TRIVIUM_SURELY_UNSET_VAR,VALUE}"]),
    ("bad-interpolation", {"model": {"critic_model_path": "${model.nope}"}}, [], ["model.critic_model_path", "cannot resolve interpolation"]),
    ("override-without-equals", {}, ["algorithm.repeat_times"], ["key=value"]),
    ("override-list-out-of-range", {}, ["buffer.explorer_input.eval_tasksets[3].path=/x"], ["eval_tasksets[3].path", "cannot apply"]),
    ("stage-without-name", {"stages": [{"mode": "train"}]}, [], ["stages[0].stage_name", "needs a stage_name"]),
    ("stage-duplicate-name", {"stages": [{"stage_name": "a"}, {"stage_name": "a"}]}, [], ["stages[1].stage_name", "'a' is used"]),
    ("stage-unknown-key", {"stages": [{"stage_name": "a", "algorithm": {"repeat_tims": 2}}]}, [],
     ["stages[0].algorithm.repeat_tims", "Did you mean 'stages[0].algorithm.repeat_times'"]),
    ("stage-contradiction", {"stages": [{"stage_name": "warmup", "algorithm": {"algorithm_type": "sft"}}]}, [],
     ["in stage 'warmup'", "only with mode: train"]),
    ("operator-without-name", {"data_processor": {"task_pipeline": {"operators": [{"args": {}}]}}}, [],
     ["data_processor.task_pipeline.operators[0].name"]),
]


@pytest.mark.parametrize("patch, overrides, expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_malformed_config_is_a_clear_error(write_config, patch, overrides, expected):
    path = write_config(patch)
    with pytest.raises(ConfigError) as error:
        prepare(path, overrides)
    message = str(error.value)
    for text in expected:
        assert text in message, f"{text!r} missing from:\n{message}"
    assert "Traceback" not in message


RAW_CASES = [
    ("yaml-syntax", "model:\n  model_path: /m\n  max_model_len: [1, 2\n", ["config.yaml", "cannot parse YAML at line"]),
    ("top-level-list", "- a\n- b\n", ["top level must be a mapping"]),
    ("tabs-and-colons", "model: : :\n", ["cannot parse YAML"]),
]


@pytest.mark.parametrize("text, expected", [case[1:] for case in RAW_CASES], ids=[case[0] for case in RAW_CASES])
def test_unreadable_file_is_a_clear_error(write_config, text, expected):
    path = write_config(text)
    with pytest.raises(ConfigError) as error:
        prepare(path)
    for fragment in expected:
        assert fragment in str(error.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        prepare(tmp_path / "absent.yaml")


def test_all_problems_are_reported_together(write_config):
    path = write_config({"algorithm": {"repeat_time": 4}, "buffer": {"batch_sise": 2}, "model": {"dtype": "float8"}})
    with pytest.raises(ConfigError) as error:
        prepare(path)
    assert "2 problems" in str(error.value)  # unknown keys are reported before values are looked at
    assert "algorithm.repeat_times" in str(error.value) and "buffer.batch_size" in str(error.value)


def test_cases_are_many_and_distinct():
    assert len(CASES) + len(RAW_CASES) >= 40
    assert len({case[0] for case in CASES}) == len(CASES)


def test_delete_marker_removes_a_key(write_config):
    path = write_config({"model": {"max_prompt_tokens": DELETE}})
    with pytest.raises(ConfigError, match="model.max_model_len: is not set and cannot be derived"):
        prepare(path)
