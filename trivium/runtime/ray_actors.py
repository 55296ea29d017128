"""The actors of a Ray run and the handles the rest of trivium sees them through.

- ``EngineHost``: one inference engine in its own process, with its end of the weight
  broadcast group (``WeightReceiver``).
- ``ExplorerActor`` / ``TrainerActor``: the workers of ``trivium.runtime.workers`` in their own
  processes; the one that writes the run's shared experience queues holds them
  (``queue_host.py``). The explorer sees the engine actors through ``RemoteEngine`` or, with
  ``cluster.engines_in_explorer``, hosts the engines itself and receives their weights; the
  trainer holds its end of the weight broadcast.
- ``ActorProxy``: blocking calls on a worker actor, as if it were the local object.

Calls go through Ray (``ray_calls.py``: errors come back as the original exception, and an
actor whose process died becomes ``ComponentDied`` naming it, so the run stops with a clear
message; ``RemoteEngine``, the engine interface over an ``EngineHost`` handle, is there too).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from trivium.explorer.settings import EngineSettings
from trivium.models.engine.base import InferenceEngine
from trivium.runtime.queue_host import QueueHosting, QueueRoute, share_queues
from trivium.runtime.ray_calls import RemoteEngine, call_actor
from trivium.runtime.settings import RunSettings
from trivium.runtime.startup_collector import collector_paused
from trivium.runtime.workers import ExplorerWorker, TrainerWorker
from trivium.sync.collective_transport import CollectiveSender
from trivium.sync.transport import WeightTransport


class ActorProxy:
    """Blocking method calls on an actor: ``proxy.train_once()`` is ``ray.get(actor.train_once.remote())``."""

    def __init__(self, handle: Any, name: str):
        self.handle = handle
        self.name = name

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: call_actor(self.handle, self.name, method, *args, **kwargs)


def prepare_actor_process(settings: RunSettings, torch_threads: int | None, queues: QueueRoute | None = None,
                          actor_name: str = "", actor: QueueHosting | None = None) -> None:
    """In a fresh actor process (``actor_name``, whose object is ``actor``): the run's plugins,
    its shared queues (held here when this actor is their host; ``None``: an actor that uses
    none), and the compute threads."""
    from trivium.registry import load_plugin_dir
    from trivium.runtime.quiet_output import quiet_third_party_output

    quiet_third_party_output(settings.log.level)
    for directory in settings.plugin_dirs:
        load_plugin_dir(directory)
    if queues is not None:
        share_queues(queues, actor_name, actor)
    if torch_threads:
        torch.set_num_threads(torch_threads)


class ActorProcess:
    """What every actor of a run answers about itself: its process and where Ray put it."""

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict[str, Any]:
        """Its process, node and the devices Ray assigned (as IDs and as CUDA_VISIBLE_DEVICES)."""
        import ray

        context = ray.get_runtime_context()
        return {
            "pid": os.getpid(),
            "node_id": context.get_node_id(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }


# ---------------------------------------------------------------- workers


class WeightReceiver:
    """A process's end of the trainer's weight broadcast, for the engines it hosts
    (``hosted_engines``): one rank for the process, whose buckets each engine copies in; or,
    for an engine whose own workers receive the tensors (vllm), one rank per worker."""

    hosted_engines: Sequence[InferenceEngine] = ()
    receiver_name = "rollout engines"
    group = None
    log: Any

    def _receiving_engine(self) -> InferenceEngine | None:
        """The engine that joins the broadcast with its own workers, when this process has one."""
        engines = self.hosted_engines
        joins = len(engines) == 1 and getattr(engines[0], "joins_weight_broadcast", False)
        return engines[0] if joins else None

    def broadcast_ranks(self) -> int:
        """Ranks this process takes in the weight broadcast group: one per receiving process."""
        engine = self._receiving_engine()
        return engine.weight_broadcast_ranks() if engine is not None else 1

    def join_broadcast_group(self, address: str, port: int, rank: int, world_size: int, backend: str, timeout: float) -> None:
        """Join as ``rank`` (and the following ranks, for an engine with several workers)."""
        engine = self._receiving_engine()
        if engine is not None:
            engine.join_weight_broadcast(
                address=address, port=port, rank=rank, world_size=world_size, backend=backend, timeout=timeout
            )
            return
        from trivium.sync.collective import WeightBroadcastGroup

        self.group = WeightBroadcastGroup(
            address=address, port=port, rank=rank, world_size=world_size, backend=backend, timeout=timeout
        )

    def receive_broadcast(self, spec, version: int) -> int:
        """Take version ``version`` from the broadcast into every hosted engine; the version they serve."""
        engine = self._receiving_engine()
        if engine is not None:
            served = engine.receive_weight_broadcast(spec, version)
        else:
            for bucket in self.group.receive(spec):
                for hosted in self.hosted_engines:
                    hosted.update_weights(bucket, version)
            served = min(hosted.version() for hosted in self.hosted_engines)
        self.log.info("%s loaded weight version %d by broadcast", self.receiver_name, version)
        return served


class ExplorerActor(ActorProcess, QueueHosting, WeightReceiver, ExplorerWorker):
    """The explorer, seeing engine actors through ``RemoteEngine``, or, without ``engine_handles``
    (``cluster.engines_in_explorer``), hosting the rollout engines itself and receiving their
    weights; the host of the run's shared queues, which it writes."""

    def __init__(self, settings: RunSettings, engine_handles: list[Any] | None, torch_threads: int | None,
                 queues: QueueRoute):
        with collector_paused():
            prepare_actor_process(settings, torch_threads, queues, "explorer", self)
            if engine_handles is None:
                from trivium.runtime.builders import build_engines

                engines = self.hosted_engines = build_engines(settings.explorer.rollout)
            else:
                engines = remote_engines(engine_handles, settings.explorer.rollout)
            super().__init__(settings, engines=engines)


class TrainerActor(ActorProcess, QueueHosting, TrainerWorker):
    """The trainer; the host of the run's shared queues when the run does not explore."""

    def __init__(self, settings: RunSettings, resume_step: int | None, torch_threads: int | None,
                 transport: WeightTransport, queues: QueueRoute, rank_launcher: Any = None):
        with collector_paused():
            prepare_actor_process(settings, torch_threads, queues, "trainer", self)
            super().__init__(settings, transport=transport, resume_step=resume_step, rank_launcher=rank_launcher)

    def node_address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def free_port(self) -> int:
        from trivium.sync.collective import free_port

        return free_port(self.node_address())

    # The trainer's end of the collective transport (the placement runs both ends at once).
    def join_broadcast_group(self, address: str, port: int, world_size: int, backend: str, timeout: float) -> None:
        self._collective_sender().join(address, port, world_size, backend, timeout)

    def broadcast_staged(self, version: int) -> int:
        return self._collective_sender().send(self.trainer, version)

    def _collective_sender(self) -> CollectiveSender:
        if not isinstance(self.weight_sender, CollectiveSender):
            raise TypeError(f"the run's weight transport is not a broadcast ({type(self.weight_sender).__name__})")
        return self.weight_sender


# ---------------------------------------------------------------- engines


class EngineHost(ActorProcess, WeightReceiver):
    """An inference engine in its own process."""

    def __init__(self, settings: EngineSettings, index: int, run: RunSettings, torch_threads: int | None):
        with collector_paused():
            self._start(settings, index, run, torch_threads)

    def _start(self, settings: EngineSettings, index: int, run: RunSettings, torch_threads: int | None) -> None:
        from trivium.models.engine import create_engine
        from trivium.monitor.logs import setup_component_logger
        from trivium.registry import load_plugin_dir
        from trivium.runtime.quiet_output import quiet_third_party_output

        quiet_third_party_output(run.log.level)
        for directory in run.plugin_dirs:  # a plugin engine type is importable here too
            load_plugin_dir(directory)
        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.name = self.receiver_name = f"rollout_engine_{index}"
        self.log = setup_component_logger(run.run_dir, self.name, run.log.level, run.log.group_by_node)
        self.engine = create_engine(settings.engine_type, **settings.factory_kwargs(index))
        self.hosted_engines = [self.engine]
        self.log.info("%s serves %s (%s)", self.name, settings.model_path, settings.engine_type)

    def generate(self, prompts, params):
        return self.engine.generate(prompts, params)

    def compute_logprobs(self, sequences, prompt_lengths):
        return self.engine.compute_logprobs(sequences, prompt_lengths)

    def replays_samples(self) -> bool:
        return bool(getattr(self.engine, "replays_samples", False))

    def replay_logprobs(self, sequences, prompt_lengths):
        return self.engine.replay_logprobs(sequences, prompt_lengths)

    def update_weights(self, state_dict, version: int) -> int:
        return self.engine.update_weights(state_dict, version)

    def version(self) -> int:
        return self.engine.version()

    def vocab_size(self) -> int | None:
        return getattr(self.engine, "vocab_size", None)

    def close(self) -> None:
        self.engine.close()


def remote_engines(handles: list[Any], engine: EngineSettings) -> list[InferenceEngine]:
    """Engines hosted by ``EngineHost`` actors, seen through the engine interface."""
    return [
        RemoteEngine(handle, tokenizer_path=engine.model_path, name=f"rollout_engine_{index}")
        for index, handle in enumerate(handles)
    ]
