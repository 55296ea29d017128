"""Checks of the inference engines a run builds: how many, on how many devices, with which options.

Applies to modes that explore. The engines are built from ``ExplorerSettings`` copied from these
keys; what an engine cannot honour is refused here, so ``trivium plan`` names it before a run
loads any model.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from trivium.config.errors import Problem
from trivium.config.lora_serving import check_lora_serving
from trivium.config.modes import MODE_TRAITS
from trivium.config.schema import TriviumConfig

# Built-in engines that run without vLLM: a vLLM option that changes what the engine does is refused.
ENGINES_REFUSING_VLLM_BEHAVIOUR = ("hf", "external", "tinker")
# Built-in engines that serve a model of their own elsewhere: RoPE is set on that server.
ENGINES_SERVED_ELSEWHERE = ("external", "tinker")
# Engines Ray placement starts as actors of their own.
ENGINES_PLACED_ON_RAY = ("hf", "vllm")


def check_engines(config: TriviumConfig, problems: list[Problem]) -> None:
    check_lora_serving(config, problems)
    if config.mode not in MODE_TRAITS or not MODE_TRAITS[config.mode].explores:
        return
    for index, aux in enumerate(config.explorer.auxiliary_models):
        if aux.engine_num > 1:
            problems.append(
                Problem(
                    f"explorer.auxiliary_models[{index}].engine_num",
                    f"is {aux.engine_num}: an auxiliary model runs one engine; set it to 1",
                )
            )
    for key, engine in _engines(config):
        if (
            engine.engine_type == "hf"
            and engine.tensor_parallel_size != 1
            and not _hf_for_lack_of_vllm(config)
        ):
            problems.append(
                Problem(
                    f"{key}.tensor_parallel_size",
                    "the hf engine runs on one device; set it to 1 (or use engine_type: vllm)",
                )
            )
        refused = _behaviour_options(engine)
        if refused and engine.engine_type in ENGINES_REFUSING_VLLM_BEHAVIOUR:
            problems.append(
                Problem(
                    f"{key}.{refused[0]}",
                    f"the {engine.engine_type} engine cannot honour {', '.join(refused)} (vLLM options that change "
                    "what the engine does); use engine_type: vllm or remove them",
                )
            )
    rollout, model = config.explorer.rollout_model, config.model
    if rollout.engine_type in ENGINES_SERVED_ELSEWHERE and (
        model.rope_scaling or model.rope_theta is not None
    ):
        problems.append(
            Problem(
                "model.rope_scaling" if model.rope_scaling else "model.rope_theta",
                f"the {rollout.engine_type} engine serves its own model; set RoPE on its server and remove it here",
            )
        )
    if config.cluster.uses_ray and rollout.engine_type not in ENGINES_PLACED_ON_RAY:
        problems.append(
            Problem(
                "explorer.rollout_model.engine_type",
                f"'{rollout.engine_type}' has no engine to place on Ray; use {' or '.join(ENGINES_PLACED_ON_RAY)}, "
                "or cluster.placement: process",
            )
        )


def _hf_for_lack_of_vllm(config: TriviumConfig) -> bool:
    """On GPUs without vLLM installed, ``engine_type: auto`` became hf because of what this machine
    lacks, not what the config says: the engine refuses tensor parallelism when it is built."""
    cluster = config.cluster
    on_gpus = cluster.device_type == "cuda" and cluster.compute_device == "cuda"
    return on_gpus and importlib.util.find_spec("vllm") is None


def _behaviour_options(engine) -> list[str]:
    """The engine options set that change what an engine does (schema fields marked ``behaviour``)."""
    return [
        field.name
        for field in dataclasses.fields(engine)
        if field.metadata.get("engine_option") == "behaviour" and getattr(engine, field.name) != field.default
    ]


def _engines(config: TriviumConfig):
    yield "explorer.rollout_model", config.explorer.rollout_model
    for index, aux in enumerate(config.explorer.auxiliary_models):
        yield f"explorer.auxiliary_models[{index}]", aux
