"""``model.rope_scaling`` and ``model.rope_theta``: overrides of a model's rotary embedding.

Every place that builds the trained model from its directory (the trainer's actor and
reference, the hf and vLLM rollout engines) applies the same overrides, so the policy
that samples is the policy that trains; the weight-sync self-check would see a mismatch.

transformers 5 keeps a model's RoPE settings in one ``rope_parameters`` dict (theta
included) and drops the older ``rope_scaling``/``rope_theta`` keywords, so the overrides
are merged into that dict here; with transformers 4 the two keywords are passed as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trivium.errors import UserError


def merged_rope_parameters(
    current: Mapping[str, Any], *, rope_scaling: Mapping[str, Any] | None, rope_theta: float | None
) -> dict[str, Any]:
    """``current`` (a config's ``rope_parameters``) with the overrides applied.

    ``rope_scaling`` may use the older spelling ``type`` for ``rope_type``. A model with one
    set of parameters per attention type (a dict of dicts) gets the overrides in each.
    """
    if current and all(isinstance(value, Mapping) for value in current.values()):
        return {
            layer_type: merged_rope_parameters(params, rope_scaling=rope_scaling, rope_theta=rope_theta)
            for layer_type, params in current.items()
        }
    merged = dict(current or {})
    if rope_scaling:
        scaling = dict(rope_scaling)
        if "type" in scaling and "rope_type" not in scaling:
            scaling["rope_type"] = scaling.pop("type")
        merged.update(scaling)
    if rope_theta is not None:
        merged["rope_theta"] = float(rope_theta)
    return merged


def rope_config_overrides(
    model_path: str, *, rope_scaling: Mapping[str, Any] | None, rope_theta: float | None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``from_pretrained`` (config attributes) that apply the overrides; {} without any."""
    if not rope_scaling and rope_theta is None:
        return {}
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise UserError(f"model.rope_scaling / rope_theta: cannot read the config of {model_path!r}: {error}") from error
    if hasattr(config, "rope_parameters"):
        current = config.rope_parameters or {}
        return {"rope_parameters": merged_rope_parameters(current, rope_scaling=rope_scaling, rope_theta=rope_theta)}
    overrides: dict[str, Any] = {}
    if rope_scaling:
        overrides["rope_scaling"] = dict(rope_scaling)
    if rope_theta is not None:
        overrides["rope_theta"] = float(rope_theta)
    return overrides
