"""Checks of what the built-in trainer can run: its ranks, strategy, offload and LoRA adapter.

Applies to modes that train. Reads what ``resolve()`` filled (``trainer.data_parallel_size``,
``cluster.device_type``, ``cluster.trainer_devices``); the runtime copies these keys into
``TrainerSettings`` without checking them again (docs/fsdp.md, docs/lora.md).
"""

from __future__ import annotations

from trivium.config.errors import Problem
from trivium.config.modes import MODE_TRAITS
from trivium.config.none_name import named
from trivium.config.schema import TriviumConfig

LORA_DTYPES = ("auto", "float32", "bfloat16", "float16")


def check_trainer(config: TriviumConfig, problems: list[Problem]) -> None:
    if config.mode not in MODE_TRAITS or not MODE_TRAITS[config.mode].trains:
        return
    if config.trainer.ulysses_sequence_parallel_size > 1:
        problems.append(
            Problem(
                "trainer.ulysses_sequence_parallel_size",
                "sequence parallelism (a value above 1) is not implemented; set it to 1",
            )
        )
    _check_ranks(config, problems)
    _check_offload(config, problems)
    _check_lora(config, problems)


def _check_ranks(config: TriviumConfig, problems: list[Problem]) -> None:
    trainer, cluster = config.trainer, config.cluster
    ranks = int(trainer.data_parallel_size or 1)
    if ranks < 1:
        problems.append(Problem("trainer.data_parallel_size", f"must be >= 1, got {ranks}"))
    if ranks > 1 and named(trainer.trainer_strategy) is None:  # one rank
        problems.append(
            Problem(
                "trainer.data_parallel_size",
                f"is {ranks} but trainer.trainer_strategy is 'none' (one rank); "
                "set trainer_strategy: fsdp2 or data_parallel_size: 1",
            )
        )
    if ranks > 1 and cluster.device_type == "cuda" and ranks > int(cluster.trainer_devices or 0):
        problems.append(
            Problem(
                "trainer.data_parallel_size",
                f"is {ranks} but the trainer has {cluster.trainer_devices} GPU(s) (cluster.trainer_devices); "
                "use at most one rank per GPU",
            )
        )


def _check_offload(config: TriviumConfig, problems: list[Problem]) -> None:
    trainer = config.trainer
    offload = [key for key in ("param_offload", "optimizer_offload") if getattr(trainer, key)]
    if not offload:
        return
    key = f"trainer.{offload[0]}"
    if config.cluster.device_type != "cuda":
        problems.append(
            Problem(key, "moves GPU memory to the CPU; this run trains on the CPU already. Remove it")
        )
    elif int(trainer.data_parallel_size or 1) < 2:
        problems.append(Problem(key, "is applied through FSDP2 and needs trainer.data_parallel_size >= 2"))
    if trainer.trainer_strategy == "ddp":
        problems.append(
            Problem(
                key,
                "offloads FSDP2's shards, but trainer_strategy 'ddp' keeps whole models on every rank; "
                "use trainer_strategy: fsdp2 to shard and offload",
            )
        )
    if trainer.optimizer_offload and not trainer.param_offload:
        problems.append(
            Problem(
                "trainer.optimizer_offload",
                "without trainer.param_offload: FSDP2 keeps the optimizer state with the parameter shards; "
                "set param_offload: true to offload both",
            )
        )


def _check_lora(config: TriviumConfig, problems: list[Problem]) -> None:
    """The adapter the trainer builds (validate() refuses more than one)."""
    adapters = config.model.lora_configs
    if not adapters:
        return
    adapter, key = adapters[0], "model.lora_configs[0]"
    if int(adapter.lora_rank) < 1:
        problems.append(Problem(f"{key}.lora_rank", f"must be >= 1, got {adapter.lora_rank}"))
    if not 0 <= float(adapter.lora_dropout) < 1:
        problems.append(Problem(f"{key}.lora_dropout", f"must be in [0, 1), got {adapter.lora_dropout}"))
    if adapter.lora_dtype not in LORA_DTYPES:
        problems.append(
            Problem(f"{key}.lora_dtype", f"is {adapter.lora_dtype!r}; use one of {', '.join(LORA_DTYPES)}")
        )
    targets = adapter.target_modules
    if not isinstance(targets, str) and (not targets or not all(isinstance(name, str) for name in targets)):
        problems.append(
            Problem(
                f"{key}.target_modules",
                f"must be 'all-linear' or a list of module names, got {targets!r}",
            )
        )
