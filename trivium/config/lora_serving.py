"""LoRA serving in the rollout engine: the derived vLLM LoRA options and their checks.

When ``model.lora_configs`` trains an adapter and the rollout engine declares the
``takes_lora_engine_options`` trait (vllm), ``fill_lora_serving`` (called by ``resolve()``) sets
``explorer.rollout_model.enable_lora`` unless the user turned it off (then the engine is sent
whole merged weights, ``serves_adapter``) and fills ``lora_kwargs`` with vLLM's LoRA engine
arguments: the smallest ``max_lora_rank`` vLLM allows at or above the adapter's rank, one
adapter slot, and ``model.fully_sharded_loras`` / ``model.max_cpu_loras`` when set; values the
user gave in ``lora_kwargs`` win. ``check_lora_serving`` (called by validation) refuses what
cannot be served. The engine itself is ``trivium/models/engine/vllm.py``.
"""

from __future__ import annotations

from trivium.config.errors import Problem
from trivium.config.schema import TriviumConfig

KEY = "explorer.rollout_model"
# The ranks vLLM accepts as max_lora_rank (its LoRAConfig).
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The LoRA engine arguments of vLLM that lora_kwargs may set.
LORA_ENGINE_ARGS = ("max_lora_rank", "max_loras", "max_cpu_loras", "fully_sharded_loras", "lora_dtype")
VLLM_LORA_DTYPES = ("auto", "float16", "bfloat16")


def takes_lora_engine_options(engine_type: str) -> bool:
    """The engine factory's trait: it starts with vLLM's LoRA options and serves adapters as adapters."""
    from trivium.models.engine import ENGINES
    from trivium.registry import RegistryError

    try:
        return bool(getattr(ENGINES.get(engine_type), "takes_lora_engine_options", False))
    except RegistryError:
        return False


def smallest_max_lora_rank(rank: int) -> int | None:
    """The smallest rank vLLM accepts as max_lora_rank that holds ``rank``; None above its largest."""
    return next((allowed for allowed in VLLM_MAX_LORA_RANKS if allowed >= rank), None)


def serves_adapter(engine_type: str, enable_lora: bool | None) -> bool:
    """Whether the rollout engine is sent the trained adapter alone (else whole merged weights):
    engines that take adapters, unless it is one started with LoRA options and ``enable_lora`` is off."""
    from trivium.models.engine import takes_lora_adapters

    if not takes_lora_adapters(engine_type):
        return False
    return bool(enable_lora) or not takes_lora_engine_options(engine_type)


def fill_lora_serving(config: TriviumConfig) -> None:
    rollout, model = config.explorer.rollout_model, config.model
    if not model.lora_configs or not takes_lora_engine_options(rollout.engine_type):
        return
    if rollout.enable_lora is False:  # whole merged weights at every sync, as to any engine
        return
    rank = int(model.lora_configs[0].lora_rank)
    derived = {"max_lora_rank": smallest_max_lora_rank(rank) or rank, "max_loras": 1}
    if model.fully_sharded_loras:
        derived["fully_sharded_loras"] = True
    if model.max_cpu_loras is not None:
        derived["max_cpu_loras"] = int(model.max_cpu_loras)
    rollout.enable_lora = True
    rollout.lora_kwargs = {**derived, **dict(rollout.lora_kwargs or {})}


def check_lora_serving(config: TriviumConfig, problems: list[Problem]) -> None:
    rollout, model = config.explorer.rollout_model, config.model
    if not rollout.enable_lora:
        for name in ("fully_sharded_loras", "max_cpu_loras"):
            if getattr(model, name) not in (None, False):
                problems.append(
                    Problem(
                        f"model.{name}",
                        "applies only where the vllm engine serves the trained adapter (model.lora_configs with "
                        "explorer.rollout_model.engine_type: vllm); remove it",
                    )
                )
    for index, aux in enumerate(config.explorer.auxiliary_models):
        for name in ("enable_lora", "lora_kwargs"):
            if getattr(aux, name):
                problems.append(
                    Problem(
                        f"explorer.auxiliary_models[{index}].{name}",
                        "an auxiliary model is not trained, so it has no adapter to serve; remove it",
                    )
                )
    if not (rollout.enable_lora or rollout.lora_kwargs):
        return
    if not takes_lora_engine_options(rollout.engine_type):
        return  # engine_rules refuses vLLM behaviour options on engines that cannot honour them
    if not model.lora_configs:
        name = "enable_lora" if rollout.enable_lora else "lora_kwargs"
        problems.append(
            Problem(
                f"{KEY}.{name}",
                "there is no adapter to serve: the engine serves the adapter trivium trains; set model.lora_configs "
                f"or remove {name}",
            )
        )
        return
    _check_lora_kwargs(dict(rollout.lora_kwargs or {}), int(model.lora_configs[0].lora_rank), problems)


def _check_lora_kwargs(kwargs: dict, rank: int, problems: list[Problem]) -> None:
    """vLLM's LoRA options given in ``lora_kwargs``, against the trained adapter's ``rank``."""
    for name in kwargs:
        if name not in LORA_ENGINE_ARGS:
            problems.append(
                Problem(
                    f"{KEY}.lora_kwargs.{name}",
                    f"is not a LoRA option of vLLM; use one of {', '.join(LORA_ENGINE_ARGS)}",
                )
            )
    if smallest_max_lora_rank(rank) is None:
        problems.append(
            Problem(
                "model.lora_configs[0].lora_rank",
                f"is {rank}; the vllm engine serves adapters of rank {VLLM_MAX_LORA_RANKS[-1]} at most: lower it, "
                "or use engine_type: hf",
            )
        )
    max_rank = kwargs.get("max_lora_rank")
    if max_rank is not None and (max_rank not in VLLM_MAX_LORA_RANKS or max_rank < rank):
        problems.append(
            Problem(
                f"{KEY}.lora_kwargs.max_lora_rank",
                f"is {max_rank}; it must be one of {list(VLLM_MAX_LORA_RANKS)} and at least the adapter's rank "
                f"({rank}): set {smallest_max_lora_rank(rank)} or remove it",
            )
        )
    if kwargs.get("max_loras", 1) != 1 or int(kwargs.get("max_cpu_loras") or 1) < 1:
        problems.append(
            Problem(
                f"{KEY}.lora_kwargs.max_loras" if kwargs.get("max_loras", 1) != 1 else "model.max_cpu_loras",
                "the engine serves one adapter at a time (each sync replaces it); set max_loras to 1 and "
                "max_cpu_loras to at least 1",
            )
        )
    dtype = kwargs.get("lora_dtype", "auto")
    if dtype not in VLLM_LORA_DTYPES:
        problems.append(
            Problem(
                f"{KEY}.lora_kwargs.lora_dtype", f"is {dtype!r}; vLLM takes {', '.join(VLLM_LORA_DTYPES)}"
            )
        )
