"""Checks of ``trainer.replay_sampling_mask`` (sampling-mask replay); part of ``validate()``'s rules.

Replay needs truncated sampling to replay (top_k or top_p, in model.* or a taskset's
rollout_args), logits the trainer can recompute (no repetition penalty), rollouts to train on
(and no teacher, whose logprobs cover the whole vocabulary), and a rollout engine that records each token's kept set (the hf engine; plugin engines with
the ``records_sampling_masks`` trait). Serve mode's engines answer outside requests with
their own sampling arguments and are refused.
"""

from __future__ import annotations

from trivium.algorithm.presets import PRESETS
from trivium.config.errors import Problem
from trivium.config.modes import MODE_TRAITS
from trivium.config.schema import TrainerConfig, TriviumConfig, field_default

KEY = "trainer.replay_sampling_mask"


def check_sampling_mask_replay(config: TriviumConfig, problems: list[Problem]) -> None:
    trainer = config.trainer
    if not trainer.replay_sampling_mask:
        if trainer.sampling_mask_max_tokens != field_default(TrainerConfig, "sampling_mask_max_tokens"):
            problems.append(
                Problem(
                    "trainer.sampling_mask_max_tokens",
                    "is only read with trainer.replay_sampling_mask: true; set that or remove it",
                )
            )
        return
    if trainer.sampling_mask_max_tokens < 1:
        problems.append(
            Problem(
                "trainer.sampling_mask_max_tokens",
                f"must be at least 1, got {trainer.sampling_mask_max_tokens}",
            )
        )
    traits = MODE_TRAITS.get(config.mode)
    if traits is not None and traits.serves_api:
        problems.append(
            Problem(
                KEY,
                f"mode '{config.mode}' serves outside requests with their own sampling arguments, and its "
                "engines record no kept sets; turn replay off",
            )
        )
        return
    preset = PRESETS.get(config.algorithm.algorithm_type)
    if preset is not None and not preset.learns_from_rollouts:
        problems.append(
            Problem(
                KEY,
                f"algorithm '{config.algorithm.algorithm_type}' trains on a dataset, whose rows were not "
                "sampled by an engine; turn replay off",
            )
        )
        return
    if preset is not None and preset.needs_teacher_logprobs:
        problems.append(
            Problem(
                KEY,
                f"algorithm '{config.algorithm.algorithm_type}' compares the engine's logprobs with a teacher's, "
                "which are taken over the whole vocabulary; turn replay off",
            )
        )
    if traits is None or not traits.explores:
        return  # trains on a buffer: the trainer refuses experiences written without their sets
    _check_engine(config, problems)
    _check_sampling(config, problems)


def _check_engine(config: TriviumConfig, problems: list[Problem]) -> None:
    from trivium.models.engine import records_sampling_masks

    engine_type = config.explorer.rollout_model.engine_type
    if not records_sampling_masks(engine_type):
        problems.append(
            Problem(
                KEY,
                f"the '{engine_type}' rollout engine cannot record the token sets its top-k / top-p sampling "
                "kept (explorer.rollout_model.engine_type); use engine_type: hf or turn replay off",
            )
        )


def _check_sampling(config: TriviumConfig, problems: list[Problem]) -> None:
    model = config.model
    sources = [
        (
            "model",
            {"top_k": model.top_k, "top_p": model.top_p, "repetition_penalty": model.repetition_penalty},
        )
    ]
    explorer_input = config.buffer.explorer_input
    for index, taskset in enumerate(explorer_input.tasksets):
        sources.append(
            (f"buffer.explorer_input.tasksets[{index}].rollout_args", dict(taskset.rollout_args or {}))
        )
    truncates = False
    for where, args in sources:
        top_k, top_p = args.get("top_k"), args.get("top_p")
        truncates |= (top_k is not None and 0 < int(top_k)) or (top_p is not None and float(top_p) < 1)
        penalty = args.get("repetition_penalty")
        if penalty is not None and float(penalty) != 1.0:
            problems.append(
                Problem(
                    f"{where}.repetition_penalty",
                    f"is {penalty}: the penalised logits are not the model's, so the trainer cannot replay the "
                    f"sampling distribution; set it to 1 or turn {KEY} off",
                )
            )
    if not truncates:
        problems.append(
            Problem(
                KEY,
                "no top-k / top-p truncation is configured (model.top_k, model.top_p or a training taskset's "
                "rollout_args), so there is no sampling mask to replay; set one or turn replay off",
            )
        )
