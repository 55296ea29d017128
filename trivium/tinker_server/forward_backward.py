"""One ``forward_backward`` (or ``forward``) call: the loss over every datum and its per-datum outputs."""

from __future__ import annotations

import numpy as np
import torch

from trivium.models.server_guard import BadRequest
from trivium.tinker_server import losses, wire
from trivium.tinker_server.policy_model import PolicyModel


def run_forward_backward(model: PolicyModel, call: wire.ForwardBackwardCall) -> bytes:
    """The loss over every datum, its gradients accumulated unless forward_only; per-datum logprobs."""

    def padded(name: str) -> torch.Tensor:
        width = max(len(datum.tokens) for datum in call.datums)
        out = torch.zeros(len(call.datums), width)
        for row, datum in enumerate(call.datums):
            out[row, : len(datum.tokens)] = torch.from_numpy(datum.inputs[name].astype(np.float32))
        return out

    targets = [datum.inputs["target_tokens"].astype(np.int64).tolist() for datum in call.datums]
    with torch.set_grad_enabled(not call.forward_only):
        logprobs, mask = model.target_logprobs([datum.tokens for datum in call.datums], targets)
        if call.loss_fn == "cross_entropy":
            with_weights = ["weights" in datum.inputs for datum in call.datums]
            if any(with_weights) and not all(with_weights):
                raise BadRequest("give weights in every datum or in none")
            weights = padded("weights") if all(with_weights) else None
            loss, elementwise = losses.cross_entropy(logprobs=logprobs, mask=mask, weights=weights)
        else:
            loss, elementwise = losses.importance_sampling(
                logprobs=logprobs,
                mask=mask,
                sampling_logprobs=padded("logprobs"),
                advantages=padded("advantages"),
            )
        if not call.forward_only:
            loss.backward()
    lengths = [len(datum.tokens) for datum in call.datums]
    per_datum = {
        "logprobs": [logprobs[row, :length].detach().numpy() for row, length in enumerate(lengths)],
        "elementwise_loss": [elementwise[row, :length].numpy() for row, length in enumerate(lengths)],
    }
    return wire.forward_backward_output(per_datum, {"loss:sum": float(loss.detach())})
