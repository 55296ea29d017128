"""The worker side of the ``vllm`` engine's weight sync, loaded into every vLLM worker.

vLLM mixes ``WeightSyncExtension`` into its worker class (``worker_extension_cls``), so
``LLM.collective_rpc("trivium_load_bucket", ...)`` calls these methods by name on every
worker. Only names and file paths cross the process boundary (vLLM's msgpack channel, no
pickled code): the tensors of a bucket travel as a safetensors file in shared memory.

The worker keeps the version of the weights it serves, so the engine's version handshake
reads it back from the worker instead of trusting its own bookkeeping.

This module is imported inside vLLM's worker processes: it depends on torch and
safetensors only, never on the rest of trivium.
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

    def trivium_begin_update(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())

    def trivium_load_bucket(self, path: str) -> int:
        """Load the named tensors in the safetensors file at ``path``; returns how many."""
        from vllm.config import set_current_vllm_config

        weights = load_file(path, device="cpu")
        with set_current_vllm_config(self.vllm_config):
            # vLLM's loaders map checkpoint names (q_proj, k_proj, ...) onto fused parameters.
            self.model_runner.get_model().load_weights(weights=list(weights.items()))
        return len(weights)

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
