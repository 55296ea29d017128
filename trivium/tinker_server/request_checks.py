"""Checks of a training request's contents, raising ``BadRequest`` before any work is queued."""

from __future__ import annotations

import numpy as np

from trivium.models.server_guard import BadRequest
from trivium.tinker_server import wire


def check_adam(optimizer_config: dict | None) -> None:
    kind = (optimizer_config or {}).get("type", "adamw")
    if kind != "adamw":
        raise BadRequest(f"optimizer {kind!r} is not served here; served: adamw")


def check_datum(
    index: int,
    datum: wire.Datum,
    loss_fn: str,
    required: tuple[str, ...],
    optional: tuple[str, ...],
    vocab: int,
    context: int,
) -> None:
    missing = [name for name in required if name not in datum.inputs]
    unknown = sorted(set(datum.inputs) - set(required) - set(optional))
    if missing or unknown:
        raise BadRequest(
            f"data[{index}].loss_fn_inputs: {loss_fn} takes {', '.join(required + optional)} "
            f"(missing {missing}, not taken {unknown})"
        )
    if not datum.tokens or len(datum.tokens) > context:
        raise BadRequest(
            f"data[{index}].model_input has {len(datum.tokens)} tokens; this model takes 1 to {context}"
        )
    for name, array in datum.inputs.items():
        if array.shape != (len(datum.tokens),):
            raise BadRequest(
                f"data[{index}].loss_fn_inputs[{name!r}] has shape {list(array.shape)}; "
                f"it must be [{len(datum.tokens)}], one value per input token"
            )
    tokens = np.asarray(datum.tokens + datum.inputs["target_tokens"].tolist())
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise BadRequest(f"data[{index}] has token ids outside this model's vocabulary of {vocab}")
