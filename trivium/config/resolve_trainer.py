"""The resolve() rules for the trainer and the run's step counts.

Fills the trainer keys that veRL-style ``trainer.trainer_config`` paths and the reference's
``algorithm.*`` spellings stand for (refusing values that disagree), the micro-batch token
budget, the trainer's total steps, the checkpoint format of a Tinker run and the data-parallel
size; and computes the explorer's and trainer's step counts that ``plan`` and the runtime read.
Called by ``trivium.config.resolve.resolve_with_notes`` after the device and sync rules.
"""

from __future__ import annotations

import math

from trivium.config.errors import ConfigError, Problem, Suggestion
from trivium.config.modes import TRAINING_MODES, traits_of
from trivium.config.schema import OptimizerConfig, TrainerConfig, TriviumConfig, field_choices, field_default
from trivium.config.taskset_size import count_rows

DEFAULT_MICRO_BATCH_TOKENS = 16384


# veRL-style trainer_config paths and the trainer keys they stand for.
TRAINER_CONFIG_ALIASES = {
    ("old_logprobs_source",): "old_logprobs_source",
    ("share_prompt_forward",): "share_prompt_forward",
    ("critic", "optim", "lr"): "critic_lr",
    ("critic", "cliprange_value"): "cliprange_value",
    ("actor_rollout_ref", "model", "enable_gradient_checkpointing"): "enable_gradient_checkpointing",
    ("actor_rollout_ref", "model", "use_remove_padding"): "use_remove_padding",
    ("actor_rollout_ref", "actor", "fsdp_config", "param_offload"): "param_offload",
    ("actor_rollout_ref", "actor", "fsdp_config", "optimizer_offload"): "optimizer_offload",
}


def fill_trainer(config: TriviumConfig, notes: list[Suggestion]) -> None:
    trainer = config.trainer
    _copy_trainer_config_aliases(config, notes)
    _copy_optimizer_clip(config, notes)
    _copy_bypass_old_logprobs(config, notes)
    if trainer.trainer_type == "verl":
        trainer.trainer_type = "default"
        notes.append(
            Suggestion(
                "trainer.trainer_type",
                "'verl' is read as 'default' (the built-in PyTorch trainer); veRL-style keys in "
                "trainer.trainer_config are passed to it unchanged",
                "note",
            )
        )
    if trainer.max_token_len_per_gpu is None and config.model.max_model_len:
        # Large enough that a batch of short sequences is one micro-batch (many tiny
        # micro-batches are several times slower), and always room for two full sequences.
        trainer.max_token_len_per_gpu = max(DEFAULT_MICRO_BATCH_TOKENS, 2 * config.model.max_model_len)
    if trainer.total_steps is None:
        trainer.total_steps = trainer_total_steps(config)
    if config.model.tinker.enable and trainer.save_hf_checkpoint == "last":
        trainer.save_hf_checkpoint = "never"
        notes.append(
            Suggestion(
                "trainer.save_hf_checkpoint",
                "never: a Tinker run's weights stay on the service; its checkpoints record their tinker:// paths",
                "note",
            )
        )
    if trainer.data_parallel_size is None:
        # One rank per trainer GPU; a CPU-only machine states its rank count explicitly.
        on_gpu = config.cluster.device_type == "cuda"
        trainer.data_parallel_size = max(1, int(config.cluster.trainer_devices or 0)) if on_gpu else 1


def _copy_trainer_config_aliases(config: TriviumConfig, notes: list[Suggestion]) -> None:
    trainer = config.trainer
    extra = trainer.trainer_config
    if not isinstance(extra, dict) and not hasattr(extra, "items"):
        return
    for path, key in TRAINER_CONFIG_ALIASES.items():
        value = _nested_get(extra, path)
        if value is None:
            continue
        choices = field_choices(TrainerConfig, key)
        source = "trainer.trainer_config." + ".".join(path)
        if choices and value not in choices:
            raise ConfigError(
                Problem(source, f"invalid value {value!r}; choose one of: {', '.join(choices)}")
            )
        setattr(trainer, key, type(getattr(trainer, key))(value))
        notes.append(Suggestion(source, f"read as trainer.{key} = {value!r}", "note"))


def _copy_optimizer_clip(config: TriviumConfig, notes: list[Suggestion]) -> None:
    """algorithm.optimizer.clip_grad (the reference's spelling) and trainer.grad_clip are one setting."""
    clip, trainer = config.algorithm.optimizer.clip_grad, config.trainer
    if clip == field_default(OptimizerConfig, "clip_grad") or clip == trainer.grad_clip:
        return
    if trainer.grad_clip != field_default(TrainerConfig, "grad_clip"):
        raise ConfigError(
            Problem(
                "algorithm.optimizer.clip_grad",
                f"{clip} disagrees with trainer.grad_clip {trainer.grad_clip}: they are one setting; set one of them",
            )
        )
    trainer.grad_clip = clip
    notes.append(Suggestion("algorithm.optimizer.clip_grad", f"read as trainer.grad_clip = {clip}", "note"))


def _copy_bypass_old_logprobs(config: TriviumConfig, notes: list[Suggestion]) -> None:
    """algorithm.bypass_old_logprobs (the reference's spelling) and trainer.old_logprobs_source are one
    setting: true is 'engine'; false is any source where the trainer computes the old logprobs."""
    bypass, trainer = config.algorithm.bypass_old_logprobs, config.trainer
    if bypass is None:
        return
    source = trainer.old_logprobs_source
    if bypass and source == field_default(TrainerConfig, "old_logprobs_source"):
        trainer.old_logprobs_source = "engine"
        notes.append(
            Suggestion(
                "algorithm.bypass_old_logprobs", "read as trainer.old_logprobs_source = 'engine'", "note"
            )
        )
    elif bypass != (source == "engine"):
        meaning = "the rollout engine's logprobs are the old ones" if bypass else "the trainer computes them"
        raise ConfigError(
            Problem(
                "algorithm.bypass_old_logprobs",
                f"{str(bypass).lower()} ({meaning}) disagrees with trainer.old_logprobs_source '{source}': "
                "they are one setting; set one of them",
            )
        )


def _nested_get(mapping, path: tuple[str, ...]):
    current = mapping
    for key in path:
        if current is None or not hasattr(current, "get"):
            return None
        current = current.get(key)
    return current


def explorer_total_steps(config: TriviumConfig) -> int | None:
    """Explorer steps of the whole run: buffer.total_steps, else epochs over the tasksets."""
    buffer = config.buffer
    if buffer.total_steps is not None:
        return buffer.total_steps
    sizes = [count_rows(taskset) for taskset in buffer.explorer_input.tasksets]
    if not sizes or any(size is None for size in sizes) or buffer.batch_size <= 0:
        return None
    return buffer.total_epochs * sum(sizes) // buffer.batch_size


def explorer_steps_to_train(config: TriviumConfig) -> int | None:
    """Explorer steps of a run that trains what it explores (colocate, both): those of its
    tasksets (``explorer_total_steps``: buffer.total_steps, else whole batches over
    total_epochs), and no more than its trainer's steps use, so it never explores a step its
    trainer would not train. None when neither count is known."""
    by_tasksets = explorer_total_steps(config)
    trainer_steps = config.trainer.total_steps
    if not trainer_steps:
        return by_tasksets
    per_step = max(1, config.buffer.batch_size * config.algorithm.repeat_times)
    used = math.ceil(trainer_steps * config.buffer.train_batch_size / per_step)
    return used if by_tasksets is None else min(by_tasksets, used)


def trainer_total_steps(config: TriviumConfig) -> int | None:
    buffer = config.buffer
    if not buffer.train_batch_size or buffer.train_batch_size <= 0:
        return None
    if traits_of(config.mode).trains_only:
        # Training from a dataset: the experience buffer is the data, read total_epochs times.
        if buffer.total_steps is not None:
            return buffer.total_steps
        rows = count_rows(buffer.trainer_input.experience_buffer)
        return None if rows is None else buffer.total_epochs * rows // buffer.train_batch_size
    if config.mode not in TRAINING_MODES:
        return None
    steps = explorer_total_steps(config)
    if steps is None:
        return None
    experiences = steps * buffer.batch_size * config.algorithm.repeat_times
    return experiences // buffer.train_batch_size
