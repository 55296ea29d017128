"""The Tinker SDK's wire formats, turned into plain values and back.

Most requests and responses are JSON. Two are protobuf: the ``forward_backward`` request
body, and the results of ``forward_backward`` and ``sample`` when the SDK polls them with
``Accept: application/x-protobuf``. The message schema is the one the SDK ships
(``tinker.proto.tinker_public_pb2``); this module only reads it, so the server needs the
``tinker`` package installed. Anything the server does not handle (images, sparse tensors,
two-dimensional targets) raises ``BadRequest`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trivium.errors import UserError
from trivium.models.server_guard import BadRequest


def _proto():
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError:
        raise UserError("serve-tinker reads the Tinker SDK's message schema: pip install tinker") from None
    return tinker_public_pb2


@dataclass
class Datum:
    """One training example: the input token ids and its ``loss_fn_inputs`` as numpy arrays."""

    tokens: list[int]
    inputs: dict[str, np.ndarray]


@dataclass
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    datums: list[Datum]
    loss_fn_config: dict[str, Any] = field(default_factory=dict)


def _dense_array(tensor: Any, name: str) -> np.ndarray:
    pb = _proto()
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
    if tensor.WhichOneof("encoding") != "dense":
        raise BadRequest(f"loss_fn_inputs[{name!r}] is a sparse tensor; this server takes dense tensors only")
    if tensor.dtype not in dtypes:
        raise BadRequest(f"loss_fn_inputs[{name!r}] has an unsupported dtype; send float32 or int64")
    array = np.frombuffer(tensor.dense, dtype=dtypes[tensor.dtype])
    shape = list(tensor.shape) or [array.size]
    if int(np.prod(shape)) != array.size:
        raise BadRequest(f"loss_fn_inputs[{name!r}] has shape {shape} but {array.size} values")
    return array.reshape(shape)


def _chunk_tokens(chunks: Any, where: str) -> list[int]:
    tokens: list[int] = []
    for chunk in chunks:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise BadRequest(
                f"{where} holds a {kind} chunk; this server takes token chunks (encoded_text) only"
            )
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return tokens


def parse_forward_backward(body: bytes) -> ForwardBackwardCall:
    """The protobuf ``ForwardBackwardRequest`` body, decoded."""
    message = _proto().ForwardBackwardRequest()
    from google.protobuf.message import DecodeError

    try:
        message.ParseFromString(body)
    except DecodeError:
        raise BadRequest(
            "the forward_backward body is not a ForwardBackwardRequest protobuf message"
        ) from None
    config: dict[str, Any] = {key: value.number for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    datums = []
    for index, datum in enumerate(message.data):
        if datum.model_input_spans or datum.loss_fn_input_spans:
            raise BadRequest(f"data[{index}] carries provenance spans, which this server does not record")
        datums.append(
            Datum(
                tokens=_chunk_tokens(datum.model_input, f"data[{index}].model_input"),
                inputs={name: _dense_array(tensor, name) for name, tensor in datum.loss_fn_inputs.items()},
            )
        )
    return ForwardBackwardCall(
        model_id=message.model_id,
        seq_id=message.seq_id,
        loss_fn=message.loss_fn,
        forward_only=message.forward_only,
        datums=datums,
        loss_fn_config=config,
    )


def model_input_tokens(model_input: Any, where: str) -> list[int]:
    """Token ids of a JSON ``ModelInput`` ({"chunks": [{"type": "encoded_text", "tokens": [...]}]})."""
    if not isinstance(model_input, dict) or not isinstance(model_input.get("chunks"), list):
        raise BadRequest(f"{where} must be a ModelInput object with a list of chunks")
    tokens: list[int] = []
    for chunk in model_input["chunks"]:
        kind = chunk.get("type", "encoded_text") if isinstance(chunk, dict) else None
        if kind != "encoded_text" or not isinstance(chunk.get("tokens"), list):
            raise BadRequest(
                f"{where} holds a {kind} chunk; this server takes token chunks (encoded_text) only"
            )
        tokens.extend(int(token) for token in chunk["tokens"])
    return tokens


def forward_backward_output(per_datum: dict[str, list[np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A protobuf ``ForwardBackwardOutput``: one record holding, per field, every datum's 1-D float32 array."""
    pb = _proto()
    message = pb.ForwardBackwardOutput(loss_fn_output_type="TorchLossReturn")
    record = message.loss_fn_outputs.add()
    record.type_tag = "TorchLossReturn"
    for name, arrays in per_datum.items():
        record.num_datums = len(arrays)
        arrays = [np.ascontiguousarray(array, dtype=np.float32).reshape(-1) for array in arrays]
        offsets = np.cumsum([0] + [array.nbytes for array in arrays]).astype(np.int64)
        batched = record.fields[name]
        batched.data = b"".join(array.tobytes() for array in arrays)
        batched.offsets = offsets.tobytes()
        batched.dtype = pb.DTYPE_FLOAT32
    for key, value in metrics.items():
        message.metrics[key] = float(value)
    return message.SerializeToString()


@dataclass
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stopped: bool  # True: a stop condition ended it; False: max_tokens did


def sample_response(sequences: list[SampledSequence], prompt_logprobs: list[float] | None) -> bytes:
    """A protobuf ``SampleResponse``; a prompt logprob that does not exist (the first) is NaN."""
    pb = _proto()
    message = pb.SampleResponse()
    for sequence in sequences:
        sampled = message.sequences.add()
        sampled.stop_reason = pb.STOP_REASON_STOP if sequence.stopped else pb.STOP_REASON_LENGTH
        sampled.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        sampled.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return message.SerializeToString()
