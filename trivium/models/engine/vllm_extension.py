"""The worker side of the ``vllm`` engine's weight sync, loaded into every vLLM worker.

vLLM mixes ``WeightSyncExtension`` into its worker class (``worker_extension_cls``), so
``LLM.collective_rpc("trivium_load_bucket", ...)`` calls these methods by name on every
worker. Only names and file paths cross the process boundary (vLLM's msgpack channel, no
pickled code): the tensors of a bucket travel as a safetensors file in shared memory.

When the engine runs in a Ray actor and the trainer in another process, each worker joins
the trainer's weight broadcast group itself (``trivium.sync.collective``: gloo on CPU, NCCL
on GPUs) and receives the buckets straight into its own memory; only the tensor layout
crosses vLLM's channel.

The worker keeps the version of the weights it serves, so the engine's version handshake
reads it back from the worker instead of trusting its own bookkeeping. Under LoRA serving the
version is the current adapter's: ``trivium_serve_adapter`` tags it once the worker holds the
adapter; over a broadcast the adapter's tensors arrive in every worker and the first writes them
as a peft-format directory (``vllm_lora.py``) that vLLM then loads.

This module is imported inside vLLM's worker processes: besides torch and safetensors it
uses only ``trivium.sync.collective`` (itself torch only), imported when a worker joins.
"""

from __future__ import annotations

from safetensors.torch import load_file


class WeightSyncExtension:
    """Methods added to vLLM's worker; ``self`` is the worker (``self.model_runner`` is vLLM's).

    One update is ``trivium_begin_update``, ``trivium_load_bucket`` per bucket, then
    ``trivium_finish_update``: vLLM's layerwise reload restores each layer's checkpoint-format
    parameters, loads the tensors, and repacks a layer for its kernels once all of the layer's
    weights have arrived, so a bucket boundary may fall inside a fused layer (q/k/v).
    """

    trivium_weight_version: int = 0
    trivium_broadcast_group = None

    def trivium_begin_update(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())

    def trivium_load_bucket(self, path: str) -> int:
        """Load the named tensors in the safetensors file at ``path``; returns how many."""
        weights = load_file(path, device="cpu")
        self._trivium_load(weights)
        return len(weights)

    def _trivium_load(self, weights: dict) -> None:
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            # vLLM's loaders map checkpoint names (q_proj, k_proj, ...) onto fused parameters.
            self.model_runner.get_model().load_weights(weights=list(weights.items()))

    def trivium_join_broadcast(
        self, address: str, port: int, first_rank: int, world_size: int, backend: str, timeout: float
    ) -> int:
        """Join the trainer's broadcast group as rank ``first_rank`` + this worker's vLLM rank."""
        from trivium.sync.collective import WeightBroadcastGroup

        rank = int(first_rank) + int(getattr(self, "rank", 0))
        self.trivium_broadcast_group = WeightBroadcastGroup(
            address=address, port=port, rank=rank, world_size=world_size, backend=backend, timeout=timeout
        )
        return rank

    def trivium_receive_broadcast(self, spec: list) -> int:
        """Receive the broadcast tensors of ``spec`` ([name, shape, dtype] each), loading each
        bucket before the next arrives; returns how many tensors were loaded."""
        group = self.trivium_broadcast_group
        if group is None:
            raise RuntimeError("this vLLM worker has not joined a weight broadcast group")
        count = 0
        for bucket in group.receive([(name, tuple(shape), dtype) for name, shape, dtype in spec]):
            self._trivium_load(bucket)
            count += len(bucket)
        return count

    def trivium_receive_adapter_broadcast(self, spec: list, folder: str, base_model: str) -> int:
        """Receive a broadcast LoRA adapter (``lora_delta`` names); the worker of rank 0 writes it
        into ``folder`` for vLLM to load. Returns how many tensors arrived."""
        from trivium.models.engine.vllm_lora import write_adapter_dir
        from trivium.models.lora_delta import split_update

        group = self.trivium_broadcast_group
        if group is None:
            raise RuntimeError("this vLLM worker has not joined a weight broadcast group")
        received: dict = {}
        for bucket in group.receive([(name, tuple(shape), dtype) for name, shape, dtype in spec]):
            received.update(bucket)
        if int(getattr(self, "rank", 0)) == 0:
            _, lora_a, lora_b = split_update(received)
            write_adapter_dir(lora_a, lora_b, folder, base_model=base_model)
        return len(received)

    def trivium_serve_adapter(self, lora_id: int, version: int) -> int:
        """Confirm this worker holds the LoRA adapter ``lora_id`` and tag it ``version``."""
        held = set(self.model_runner.list_loras())
        if int(lora_id) not in held:
            raise RuntimeError(f"vLLM worker holds LoRA adapters {sorted(held)}, not {lora_id}")
        self.trivium_weight_version = int(version)
        return self.trivium_weight_version

    def trivium_finish_update(self, version: int) -> int:
        """Repack the layers that are still pending, tag the weights ``version``, return it."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(self.model_runner.get_model(), self.vllm_config.model_config)
        self.trivium_weight_version = int(version)
        return self.trivium_weight_version

    def trivium_weight_version_served(self) -> int:
        return int(self.trivium_weight_version)
