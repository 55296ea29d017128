"""The vllm engine's weight loading: whole weights in buckets, a broadcast, or a LoRA adapter.

``VLLMWeightLoading`` is the part of ``VLLMEngine`` (``vllm.py``) that takes new weights:
``update_weights`` sends buckets of tensors to every worker through ``WeightSyncExtension``
(``vllm_extension.py``) and reads the served version back; when the engine is a Ray actor, its
workers join the trainer's weight broadcast group and receive the buckets themselves; an
update that is a LoRA adapter alone is written in peft's format (``vllm_lora.py``) and added
as a new vLLM adapter tagged with the update's version, the previous one removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from trivium.errors import UserError
from trivium.models.engine.vllm_lora import is_adapter_tensor, write_adapter_dir
from trivium.models.lora_delta import split_update

DEFAULT_BUCKET_BYTES = 256 * 2**20


def weight_buckets(
    state_dict: Mapping[str, torch.Tensor], bucket_bytes: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Split ``state_dict`` in order into buckets of at most ``bucket_bytes`` (a bigger tensor
    gets a bucket of its own). Tensors are copied to contiguous CPU memory that shares no
    storage with another, as safetensors requires (tied embeddings share theirs)."""
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = tensor.detach().to("cpu", copy=True).contiguous()
        size += nbytes
    if bucket:
        yield bucket


def _shared_memory_dir() -> str | None:
    """A RAM-backed directory for weight buckets when the machine has one (Linux /dev/shm)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class VLLMWeightLoading:
    """Weight loading of ``VLLMEngine``: reads its ``llm``, ``bucket_bytes``, ``model_path``,
    ``lora_enabled`` and adapter state, and calls its ``_wake`` and ``_served_version``."""

    def start_adapters(self, *, enabled: bool) -> None:
        """No adapter yet: requests are served by the base model until the first adapter arrives."""
        self.lora_enabled = enabled
        self._lora_request = None  # the adapter every request is served with; None: the base model
        self._lora_ids = 0

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        """Send ``state_dict`` bucket by bucket to every worker, tag it ``version``, and return
        the version the workers report back. The prefix cache is cleared: cached KV entries
        were computed by the old weights. A LoRA adapter in the update (``lora_delta`` names) is
        served as a new vLLM adapter; whole weights in it are loaded first."""
        whole, lora_a, lora_b = split_update(state_dict)
        if lora_a or lora_b:
            self._require_lora()
            if whole:
                self._load_whole_weights(whole, version)
            folder = self._new_adapter_dir(version)
            try:
                write_adapter_dir(lora_a, lora_b, folder, base_model=self.model_path)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            return self._serve_adapter(folder, version)
        return self._load_whole_weights(state_dict, version)

    def _load_whole_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        self._wake()
        self.llm.collective_rpc("trivium_begin_update")
        with tempfile.TemporaryDirectory(prefix="trivium-vllm-weights-", dir=_shared_memory_dir()) as folder:
            for index, bucket in enumerate(weight_buckets(state_dict, self.bucket_bytes)):
                path = os.path.join(folder, f"bucket_{index}.safetensors")
                save_file(bucket, path)
                del bucket
                loaded = self.llm.collective_rpc("trivium_load_bucket", args=(path,))
                os.remove(path)
                if len(set(loaded)) != 1:
                    raise RuntimeError(
                        f"vLLM workers loaded different numbers of tensors from one bucket: {loaded}"
                    )
        self.llm.collective_rpc("trivium_finish_update", args=(int(version),))
        self.llm.reset_prefix_cache()
        self._version = self._served_version()
        return self._version

    def weight_broadcast_ranks(self) -> int:
        """How many ranks this engine takes in a weight broadcast group: one per vLLM worker."""
        return int(self.llm.llm_engine.vllm_config.parallel_config.world_size)

    def join_weight_broadcast(
        self, *, address: str, port: int, rank: int, world_size: int, backend: str, timeout: float
    ) -> None:
        """Every worker joins the trainer's broadcast group (``trivium.sync.collective``), the
        worker of vLLM rank ``r`` as rank ``rank + r``. Blocks until the whole group has joined."""
        self._wake()
        self.llm.collective_rpc(
            "trivium_join_broadcast",
            args=(address, int(port), int(rank), int(world_size), backend, float(timeout)),
        )

    def receive_weight_broadcast(self, spec: Sequence[tuple[str, tuple[int, ...], str]], version: int) -> int:
        """Receive the tensors of ``spec`` broadcast by the trainer, bucket by bucket in every
        worker, load them, tag them ``version``, and return the version the workers report.
        A LoRA adapter (every name an adapter half) is received by every worker, written by the
        first into a peft-format directory, and served as a new vLLM adapter."""
        adapter_names = [is_adapter_tensor(name) for name, _, _ in spec]
        if any(adapter_names):
            if not all(adapter_names):
                raise RuntimeError(
                    "a broadcast update holds both whole weights and a LoRA adapter; send one kind"
                )
            self._require_lora()
            self._wake()
            folder = self._new_adapter_dir(version)
            plain = [[str(name), [int(d) for d in shape], str(dtype)] for name, shape, dtype in spec]
            received = self.llm.collective_rpc(
                "trivium_receive_adapter_broadcast", args=(plain, folder, self.model_path)
            )
            if len(set(received)) != 1 or received[0] != len(plain):
                raise RuntimeError(
                    f"vLLM workers received {received} adapter tensors of the {len(plain)} broadcast"
                )
            return self._serve_adapter(folder, version)
        self._wake()
        self.llm.collective_rpc("trivium_begin_update")
        plain = [[str(name), [int(d) for d in shape], str(dtype)] for name, shape, dtype in spec]
        loaded = self.llm.collective_rpc("trivium_receive_broadcast", args=(plain,))
        if len(set(loaded)) != 1 or loaded[0] != len(plain):
            raise RuntimeError(f"vLLM workers loaded {loaded} tensors of the {len(plain)} broadcast")
        self.llm.collective_rpc("trivium_finish_update", args=(int(version),))
        self.llm.reset_prefix_cache()
        self._version = self._served_version()
        return self._version

    # ---- LoRA adapters -------------------------------------------------------------------

    def _require_lora(self) -> None:
        if not self.lora_enabled:
            raise UserError(
                "the vllm engine received a LoRA adapter but was started without LoRA serving; it starts with "
                "it when model.lora_configs is set (explorer.rollout_model.enable_lora, derived)"
            )

    def _new_adapter_dir(self, version: int) -> str:
        return tempfile.mkdtemp(prefix=f"trivium-vllm-lora-v{int(version)}-", dir=_shared_memory_dir())

    def _serve_adapter(self, folder: str, version: int) -> int:
        """Add the adapter in ``folder`` as a new vLLM adapter, serve it from now on, remove the
        previous one; every worker confirms it holds the new adapter and tags it ``version``."""
        from vllm.lora.request import LoRARequest

        self._wake()
        self._lora_ids += 1
        request = LoRARequest(f"trivium-v{int(version)}", self._lora_ids, folder)
        previous = self._lora_request
        try:
            if not self.llm.llm_engine.add_lora(request):
                raise RuntimeError(f"vLLM did not load the LoRA adapter of weight version {version}")
        finally:
            # vLLM has read the files into memory; the one adapter it holds is never evicted and
            # reread, so nothing is left in shared memory (an engine killed later leaks nothing).
            shutil.rmtree(folder, ignore_errors=True)
        self._lora_request = request
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
        self.llm.collective_rpc("trivium_serve_adapter", args=(request.lora_int_id, int(version)))
        self.llm.reset_prefix_cache()
        self._version = self._served_version()
        return self._version

    @property
    def served_adapter(self):
        """The vLLM ``LoRARequest`` every request is served with (None: the base model)."""
        return self._lora_request
