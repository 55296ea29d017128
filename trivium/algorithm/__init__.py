"""Algorithm library: pure tensor functions for advantages, losses, KL and entropy.

Nothing here reads configuration or touches models; the trainer looks functions up by name
in the registries below and passes tensors and explicit keyword arguments. The re-exports
are resolved lazily, so reading ``trivium.algorithm.presets`` (plain data) does not import
torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ADVANTAGE_FNS": "advantages",
    "register_advantage_fn": "advantages",
    "requires_critic": "advantages",
    "requires_episodes": "advantages",
    "requires_groups": "advantages",
    "LOSS_AGG_MODES": "aggregation",
    "aggregate_loss": "aggregation",
    "aggregation_denominator": "aggregation",
    "masked_mean": "aggregation",
    "masked_sum": "aggregation",
    "masked_whiten": "aggregation",
    "check_fn_args": "arguments",
    "tunable_args": "arguments",
    "ENTROPY_LOSS_FNS": "entropy",
    "entropy_from_logits": "entropy",
    "KL_FNS": "kl",
    "apply_kl_penalty": "kl",
    "kl_loss": "kl",
    "logprobs_from_logits": "logprobs",
    "POLICY_LOSS_FNS": "policy_losses",
    "PRESETS": "presets",
    "AlgorithmPreset": "presets",
    "clipped_value_loss": "value_loss",
}

__all__ = [
    "ADVANTAGE_FNS",
    "ENTROPY_LOSS_FNS",
    "KL_FNS",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_FNS",
    "PRESETS",
    "AlgorithmPreset",
    "aggregate_loss",
    "aggregation_denominator",
    "apply_kl_penalty",
    "check_fn_args",
    "clipped_value_loss",
    "entropy_from_logits",
    "kl_loss",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "register_advantage_fn",
    "requires_critic",
    "requires_episodes",
    "requires_groups",
    "tunable_args",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trivium.algorithm' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"trivium.algorithm.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
