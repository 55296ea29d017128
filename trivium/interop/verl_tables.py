"""The veRL -> trivium key tables: plain data, read by ``verl_import``.

Keys that need arithmetic or touch several trivium keys (batch sizes, KL switches, data
files, the reward model, GPU split) are handled in code; everything one-to-one is here.
"""

from __future__ import annotations

# veRL defaults that the batch arithmetic and GPU split need when a script leaves them out.
VERL_DEFAULTS = {
    "data.train_batch_size": 1024,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.rollout.n": 1,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "algorithm.kl_penalty": "kl",
    "algorithm.kl_ctrl.type": "fixed",
    "algorithm.kl_ctrl.target_kl": 0.1,
    "algorithm.kl_ctrl.horizon": 10000,
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
    "data.prompt_key": "prompt",
}

# veRL's KL controller (algorithm.kl_ctrl), read only with use_kl_in_reward.
KL_CONTROLLER_KEYS = ("algorithm.kl_ctrl.kl_coef", "algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl",
                      "algorithm.kl_ctrl.horizon")

# One veRL key -> one trivium key, value unchanged.
DIRECT = {
    "algorithm.gamma": "algorithm.advantage_fn_args.gamma",
    "algorithm.lam": "algorithm.advantage_fn_args.lam",
    "algorithm.kl_ctrl.kl_coef": "algorithm.kl_penalty_fn_args.kl_coef",
    "data.max_prompt_length": "model.max_prompt_tokens",
    "data.max_response_length": "model.max_response_tokens",
    "data.filter_overlong_prompts": "model.enable_prompt_truncation",
    "actor_rollout_ref.model.path": "model.model_path",
    "critic.model.path": "model.critic_model_path",
    "actor_rollout_ref.actor.use_dynamic_bsz": "trainer.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "trainer.max_token_len_per_gpu",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "trainer.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.grad_clip": "trainer.grad_clip",
    "actor_rollout_ref.actor.ppo_epochs": "trainer.ppo_epochs",
    "actor_rollout_ref.actor.loss_agg_mode": "algorithm.loss_agg_mode",
    "actor_rollout_ref.actor.entropy_coeff": "algorithm.entropy_loss_fn_args.entropy_coef",
    "actor_rollout_ref.actor.clip_ratio": "algorithm.policy_loss_fn_args.clip_range",
    "actor_rollout_ref.actor.clip_ratio_low": "algorithm.policy_loss_fn_args.clip_range_low",
    "actor_rollout_ref.actor.clip_ratio_high": "algorithm.policy_loss_fn_args.clip_range_high",
    "actor_rollout_ref.rollout.temperature": "model.temperature",
    "actor_rollout_ref.rollout.top_p": "model.top_p",
    "actor_rollout_ref.rollout.top_k": "model.top_k",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "explorer.rollout_model.tensor_parallel_size",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "explorer.rollout_model.gpu_memory_utilization",
    "trainer.project_name": "project",
    "trainer.experiment_name": "name",
    "trainer.n_gpus_per_node": "cluster.gpu_per_node",
    "trainer.nnodes": "cluster.node_num",
    "trainer.save_freq": "trainer.save_interval",
    "trainer.test_freq": "explorer.eval_interval",
    "trainer.total_epochs": "buffer.total_epochs",
    "trainer.val_before_train": "explorer.eval_on_startup",
}

# The actor's optimizer section moves to algorithm.optimizer; these keys change name.
OPTIMIZER_PREFIX = "actor_rollout_ref.actor.optim."
OPTIMIZER_RENAMES = {"warmup_style": "lr_scheduler_type"}

# Keys with no effect in trivium, and why.
IGNORED = {
    "data.truncation": "prompts longer than model.max_prompt_tokens are cut on the right "
    "when model.enable_prompt_truncation is on",
    "data.return_raw_chat": "workflows always receive the raw dataset row",
    "data.val_batch_size": "deprecated in veRL; evaluation uses buffer.batch_size",
    "data.tokenizer": "the tokenizer always comes from model.model_path",
    "actor_rollout_ref.rollout.name": "the explorer's engine is chosen by explorer.rollout_model.engine_type",
    "actor_rollout_ref.rollout.mode": "the explorer always runs its engines asynchronously",
    "actor_rollout_ref.actor.optim.total_training_steps": "filled in from the run length at start-up",
    "actor_rollout_ref.actor.ppo_mini_batch_size_per_gpu": "trivium derives per-device batches itself",
    "trainer.resume_from_path": "trivium resumes from the latest checkpoint in "
    "<checkpoint_root_dir>/<project>/<name>/; copy the checkpoint there",
    "trainer.device": "the device is chosen by the placement of each component",
    "trainer.default_hdfs_dir": "checkpoints are written under checkpoint_root_dir only",
}

# Rollout-engine keys kept for the trainer's log-prob pass (veRL computes old log-probs with them).
ROLLOUT_PASSED_THROUGH = ("actor_rollout_ref.rollout.log_prob_",)

# Passed-through keys that trivium's own trainer also reads under its own name.
ALSO_MAPPED = {
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
}

# trainer.logger entries trivium can write to (console output is always on).
MONITORS = ("tensorboard", "wandb", "mlflow")

# Sections whose remaining keys go to trainer.trainer_config.<same path> unchanged.
PASSED_THROUGH_SECTIONS = ("actor_rollout_ref.", "critic.", "trainer.", "algorithm.")

# Why keys of the other sections have no equivalent, by section.
SECTION_REASONS = {
    "actor_rollout_ref.rollout.": "rollout engine settings live in explorer.rollout_model; "
    "this one has no equivalent",
    "data.": "dataset loading is configured per taskset in buffer.explorer_input",
    "reward_model.": "the reward model runs as an inference engine (explorer.auxiliary_models); "
    "training-worker settings do not apply",
    "custom_reward_function.": "choose a reward function with buffer.explorer_input.default_reward_fn_type "
    "(a registered name or 'package.module:function')",
}

ADVANTAGE_ESTIMATORS = {  # veRL adv_estimator -> (algorithm_type, advantage_fn)
    "gae": ("ppo", "ppo"),
    "grpo": ("grpo", "grpo"),
    "rloo": ("rloo", "rloo"),
    "reinforce_plus_plus": ("reinforceplusplus", "reinforceplusplus"),
    "remax": ("remax", "remax"),
}

KL_NAMES = {"kl": "k1", "mse": "k2"}  # veRL KL estimator names that trivium spells differently

# trainer.resume_mode -> continue_from_checkpoint
RESUME_MODES = {"auto": True, "resume_path": True, "disable": False}

# Split names the taskset reader finds by file name.
KNOWN_SPLITS = ("train", "test", "validation", "valid", "val", "dev")

# Keys veRL counts in its own steps (one veRL step = sync_interval trivium steps).
COUNTED_IN_VERL_STEPS = ("trainer.test_freq", "trainer.save_freq", "trainer.total_training_steps")

# Fixed synchronizer settings that reproduce veRL's schedule.
SYNCHRONIZER = {"sync_style": "fixed", "sync_offset": 1, "sync_timeout": 1200}

# Where each top-level trivium section goes in the written file.
SECTION_ORDER = (
    "project",
    "name",
    "mode",
    "checkpoint_root_dir",
    "continue_from_checkpoint",
    "algorithm",
    "model",
    "cluster",
    "buffer",
    "explorer",
    "synchronizer",
    "trainer",
    "monitor",
)
