"""The ``ray`` placement: start or join Ray, reserve resources, create the actors.

It also runs the collective weight transport's broadcast: it joins the trainer actor and
every process hosting engines in a process group and drives both ends of each version's
broadcast.

Every actor has a bundle: each rollout engine, each rank of the trainer (ranks 1..N-1 are
started by the trainer actor, see ``ray_trainer_ranks.py``) and the explorer; the shared
experience queues live in the process of their writer (``queue_host.py``). On a cluster
with GPUs the bundles follow the run's GPU layout (``config/gpu_layout.py``): one
STRICT_PACK placement group per machine of the layout, an engine's bundle holding its GPUs
and a rank's its GPU, checked against the live nodes first (``ray_fit.py``);
``ray_placement.json`` records where each actor landed. On CPU-only machines one group packs
a fraction of a CPU per actor, so a 2-core machine never waits for resources that do not
exist; each process then sets its own torch thread count so the cores are split, not
oversubscribed. There, engines that can share a process run inside the explorer's actor
(``cluster.engines_in_explorer``): no process of their own to start, import torch in and load
the model in, which on a small machine is most of a run's start-up.

Without ``cluster.ray_address`` (or ``RAY_ADDRESS``) a local Ray is started (``local_ray.py``;
``trivium run`` starts it before its own heavy imports) and shut down at the end; with one,
the run joins that cluster and leaves it running. Actors are named in the run's namespace
(``ray_namespace``) and killed at the end of the run either way.
"""

from __future__ import annotations

import logging
import math
import os
from typing import TYPE_CHECKING, Any, cast

from trivium.config.gpu_layout import GpuLayout
from trivium.core.durations import seconds_text
from trivium.core.storage_kinds import storage_kind
from trivium.errors import ComponentDied, UserError
from trivium.runtime import local_ray
from trivium.runtime.placement import PLACEMENT_TYPES, Placement
from trivium.runtime.queue_host import QUEUE_CALLS, QUEUE_CONCURRENCY, QueueRoute
from trivium.runtime.ray_actors import (
    ActorProxy,
    EngineHost,
    ExplorerActor,
    TrainerActor,
)
from trivium.runtime.ray_calls import actor_errors, call_actor
from trivium.runtime.ray_fit import check_cluster_fits
from trivium.runtime.ray_trainer_ranks import RayRanks, rank_actor_name
from trivium.runtime.settings import RunSettings
from trivium.sync.synchronizer import SyncTimeout
from trivium.sync.transport import WeightTransport
from trivium.sync.weight_update import WeightUpdate

if TYPE_CHECKING:
    from trivium.runtime.worker_sides import ExplorerSide, TrainerSide

logger = logging.getLogger("trivium.runtime")

# The CPU slice each actor reserves on a CPU-only cluster.
CPU_SLICE = 0.25
ACTOR_TABLE = "ray_actors.json"
PLACEMENT_TABLE = "ray_placement.json"


@PLACEMENT_TYPES.register("ray")
class RayPlacement(Placement):
    separate_processes = True

    def __init__(self, settings: RunSettings):
        import ray

        super().__init__(settings)
        placement = settings.placement
        local_ray.connect(placement.ray_address, placement.namespace, settings.log.level)
        self.namespace = placement.namespace
        # GPUs are reserved and assigned whenever the cluster has them; they are computed on
        # only with compute_device cuda (cpu: a placement rehearsal on machines without GPUs).
        self.on_gpus = placement.device_type == "cuda"
        self.computes_on_gpus = placement.compute_device == "cuda"
        # Checked by validate() (placement_rules.py): only on CPU, with engines that share a process.
        self.engines_in_explorer = placement.engines_in_explorer
        self.handles: dict[str, Any] = {}
        self.engine_handles: list[Any] = []
        self.trainer_handle = None
        self._slots: dict[str, tuple[int, int]] = {}
        self._reserve()
        self.queues = self._queue_route()
        cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
        self.trainer_threads, self.engine_threads = self._thread_split(cpus)
        where = f"the cluster at {placement.ray_address}" if placement.ray_address else "a local Ray"
        logger.info("placed on %s (namespace %s, %d CPUs)", where, self.namespace, cpus)

    # ------------------------------------------------------------------ resources
    def _reserve(self) -> None:
        """Placement groups for every actor; ``self._slots[name]`` is its (group, bundle index)."""
        settings = self.settings  # the engines' types and sizes were checked by validate() (config/engine_rules.py)
        layout = settings.placement.layout if self.on_gpus else None
        if layout is None:
            self._reserve_packed()
        else:
            check_cluster_fits(layout, self.ray_nodes())
            self._reserve_by_machine(layout)

    def _reserve_packed(self) -> None:
        """CPU only: one group, a slice of a CPU per actor, packed wherever Ray finds room."""
        settings, bundles = self.settings, []
        names = []
        if settings.traits.explores:
            if not self.engines_in_explorer:
                names += [f"engine_{index}" for index in range(settings.explorer.rollout.count)]
            names.append("explorer")
        if settings.traits.trains:
            names += ["trainer", *(rank_actor_name(rank) for rank in range(1, settings.trainer.data_parallel_size))]
        for name in names:
            self._slots[name] = (0, len(bundles))
            bundles.append({"CPU": CPU_SLICE})
        self._make_groups([(bundles, "PACK", None)])

    def _reserve_by_machine(self, layout: GpuLayout) -> None:
        """One STRICT_PACK group per machine of the layout, each holding all of that machine's GPUs,
        so every group lands on a machine of its own, as ``trivium plan`` shows it."""
        settings = self.settings
        machines: dict[int, list[tuple[str, float]]] = {}
        engines = [slot for slot in layout.engines if slot.model == "rollout"]
        for slot in engines:
            machines.setdefault(layout.node_of(slot.gpus[0]), []).append((f"engine_{slot.index}", len(slot.gpus)))
        if settings.traits.explores:
            auxiliary = [gpu for slot in layout.engines if slot.model != "rollout" for gpu in slot.gpus]
            # The explorer hosts the auxiliary engines: it takes their GPUs, beside the first of them.
            anchor = auxiliary[0] if auxiliary else engines[0].gpus[0] if engines else layout.trainer_gpus[0]
            machines.setdefault(layout.node_of(anchor), []).append(("explorer", len(auxiliary)))
        if settings.traits.trains:
            for rank, gpu in enumerate(layout.trainer_gpus):
                name = "trainer" if rank == 0 else rank_actor_name(rank)
                machines.setdefault(layout.node_of(gpu), []).append((name, 1))
        groups = []
        for group_index, (node, members) in enumerate(sorted(machines.items())):
            bundles = []
            for name, gpus in members:
                self._slots[name] = (group_index, len(bundles))
                bundles.append({"CPU": CPU_SLICE, **({"GPU": gpus} if gpus else {})})
            groups.append((bundles, "STRICT_PACK", node))
        self._make_groups(groups)

    def _make_groups(self, groups: list[tuple[list[dict[str, float]], str, int | None]]) -> None:
        import ray
        from ray.util.placement_group import placement_group

        self.groups = [placement_group(bundles, strategy=strategy) for bundles, strategy, _ in groups]
        self.group_machines = [machine for _, _, machine in groups]
        ready, _ = ray.wait([group.ready() for group in self.groups], num_returns=len(self.groups), timeout=120)
        if len(ready) < len(self.groups):
            wanted = [bundles for bundles, _, _ in groups]
            raise UserError(
                f"Ray could not reserve the run's resources within 120 s: {wanted}; the cluster has "
                f"{ray.cluster_resources()}. Lower engine_num / tensor_parallel_size or add nodes."
            )

    def _slot(self, name: str) -> tuple[Any, int]:
        group_index, bundle = self._slots[name]
        return self.groups[group_index], bundle

    @staticmethod
    def ray_nodes() -> list[dict[str, Any]]:
        import ray

        return [node for node in ray.nodes() if node.get("Alive")]

    def _options(self, name: str, **options: Any) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group_index, bundle = self._slots[name]
        group = self.groups[group_index]
        gpus = group.bundle_specs[bundle].get("GPU", 0)
        return {
            "name": name,
            "namespace": self.namespace,
            "num_cpus": CPU_SLICE,
            "num_gpus": gpus,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=bundle),
            **options,
        }

    def _thread_split(self, cpus: int) -> tuple[int, int]:
        """(trainer threads, threads per engine) when they all compute on the same CPUs."""
        engines = self.settings.explorer.rollout.count if self.settings.traits.explores else 0
        if not self.settings.traits.trains:
            return 1, max(1, cpus // max(1, engines))
        if not engines:
            return cpus, 1
        trainer = max(1, cpus - cpus // 2)
        return trainer, max(1, math.floor((cpus - trainer) / engines))

    def _queue_route(self) -> QueueRoute:
        """The run's in-memory queues shared across processes, held by their writer: the
        explorer, or the trainer in a run that does not explore."""
        storages = {}
        if self.settings.explorer is not None:
            storages[self.settings.explorer.experience_buffer.name] = self.settings.explorer.experience_buffer
        if self.settings.trainer_input is not None:
            inputs = self.settings.trainer_input
            for storage in [inputs.experience_buffer, *(buffer for _, buffer in inputs.auxiliary_buffers)]:
                storages[storage.name] = storage
        kinds = {name: storage_kind(storage.storage_type) for name, storage in storages.items()}
        # Only an in-memory queue shared by name needs a host; a durable one is shared through its files.
        shared = tuple(storage for name, storage in storages.items()
                       if kinds[name].shared_across_processes and not kinds[name].durable)
        host = "explorer" if "explorer" in self._slots else "trainer"
        return QueueRoute(host=host, namespace=self.namespace, storages=shared)

    def _worker(self, worker_class: type, name: str) -> Any:
        """A worker actor class, placed as ``name``: the driver's calls and the queue calls (on
        the queue host) each have their own threads."""
        import ray

        remote = ray.remote(concurrency_groups={QUEUE_CALLS: QUEUE_CONCURRENCY})(worker_class)
        return remote.options(**self._options(name, max_concurrency=2))

    # ------------------------------------------------------------------ workers
    def engines(self) -> list[Any]:
        import ray

        if self.engine_handles:
            return self.engine_handles
        rollout = self.settings.explorer.rollout
        for index in range(rollout.count):
            name = f"rollout_engine_{index}"
            handle = ray.remote(EngineHost).options(**self._options(f"engine_{index}") | {"name": name}).remote(
                rollout, index, self.settings, None if self.computes_on_gpus else self.engine_threads
            )
            self.handles[name] = handle
            self.engine_handles.append(handle)
        return self.engine_handles  # built while the other actors are: ``placed`` waits for them

    def explorer(self) -> ExplorerSide:
        """The explorer actor; it hosts the rollout engines itself with ``engines_in_explorer``,
        computing with the engines' share of the cores."""
        if self.engines_in_explorer:
            engines, threads = None, self.engine_threads
        else:
            engines, threads = self.engines(), 1
        handle = self._worker(ExplorerActor, "explorer").remote(self.settings, engines, threads, self.queues)
        self.handles["explorer"] = handle
        return cast("ExplorerSide", ActorProxy(handle, "explorer"))

    def _weight_receivers(self) -> dict[str, Any]:
        """The actors that take the weight broadcast, by name: the explorer when it hosts the
        engines, the engine actors otherwise."""
        if self.engines_in_explorer:
            return {"explorer": self.handles["explorer"]}
        return {f"rollout_engine_{index}": handle for index, handle in enumerate(self.engine_handles)}

    def trainer(self, resume_step: int | None, transport: WeightTransport) -> TrainerSide:
        threads = None if self.computes_on_gpus else self.trainer_threads
        ranks = self.settings.trainer.data_parallel_size
        launcher = RayRanks(
            settings=self.settings,
            slots=[self._slot(rank_actor_name(rank)) for rank in range(1, ranks)],
            cpu_slice=CPU_SLICE,
            on_gpus=self.on_gpus,
            torch_threads=threads,
        ) if ranks > 1 else None
        handle = self._worker(TrainerActor, "trainer").remote(
            self.settings, resume_step, threads, transport, self.queues, launcher
        )
        self.handles["trainer"] = handle
        self.trainer_handle = handle
        return cast("TrainerSide", ActorProxy(handle, "trainer"))

    def placed(self) -> None:
        """Every actor was started without waiting for it, so their processes import and load in
        parallel; wait for each constructor here, in the order they were started (the first
        error names its actor), then record where they landed."""
        for name, handle in self.handles.items():
            call_actor(handle, name, "pid")
        self.write_actor_table()

    def write_actor_table(self) -> None:
        """``<run dir>/ray_actors.json``: the process id of every worker and engine actor."""
        import json

        import ray

        pids = {name: ray.get(handle.pid.remote()) for name, handle in self.handles.items()}
        if self.trainer_handle is not None:
            for rank in range(1, self.settings.trainer.data_parallel_size):
                name = rank_actor_name(rank)
                pids[name] = ray.get(ray.get_actor(name, namespace=self.namespace).pid.remote())
        (self.settings.run_dir / ACTOR_TABLE).write_text(json.dumps(pids, indent=2))
        self._write_placement_table()

    def _write_placement_table(self) -> None:
        """``<run dir>/ray_placement.json``: for every actor, its node, the layout machine whose
        group holds it, and the devices Ray assigned it; and which Ray node each machine is."""
        import json

        import ray
        from ray.util.placement_group import placement_group_table

        machines = {}
        for group, machine in zip(self.groups, self.group_machines):
            if machine is not None:
                machines[str(machine)] = next(iter(placement_group_table(group)["bundles_to_node_id"].values()))
        actors = {}
        for name, handle in self.handles.items():
            actors[name] = ray.get(handle.where.remote())
        if self.trainer_handle is not None:
            for rank in range(1, self.settings.trainer.data_parallel_size):
                name = rank_actor_name(rank)
                actors[name] = ray.get(ray.get_actor(name, namespace=self.namespace).where.remote())
        for name, where in actors.items():
            slot = self._slots.get(name) or self._slots.get(name.replace("rollout_engine_", "engine_"))
            where["machine"] = None if slot is None else self.group_machines[slot[0]]
        table = {"compute_device": self.settings.placement.compute_device, "machines": machines, "actors": actors}
        (self.settings.run_dir / PLACEMENT_TABLE).write_text(json.dumps(table, indent=2))

    # ------------------------------------------------------------------ weights
    def weight_broadcaster(self) -> RayPlacement:
        return self

    def connect_weight_broadcast(self) -> None:
        """Join the trainer (rank 0) and every engine in one broadcast group."""
        timeout = self.settings.sync.timeout
        backend = "nccl" if self.computes_on_gpus else "gloo"
        trainer = ActorProxy(self.trainer_handle, "trainer")
        address, port = trainer.node_address(), trainer.free_port()
        # An engine whose workers receive the weights themselves (vllm) takes one rank per worker.
        receivers = self._weight_receivers()
        ranks = {name: call_actor(handle, name, "broadcast_ranks") for name, handle in receivers.items()}
        world = 1 + sum(ranks.values())
        refs = {"trainer": self.trainer_handle.join_broadcast_group.remote(address, port, world, backend, timeout)}
        first_rank = 1
        for name, handle in receivers.items():
            refs[name] = handle.join_broadcast_group.remote(address, port, first_rank, world, backend, timeout)
            first_rank += ranks[name]
        self._wait_all(refs, timeout, what=f"joining the weight broadcast group ({backend})")
        logger.info("weight broadcast group ready: %d processes over %s at %s:%d", world, backend, address, port)

    def broadcast_weights(self, update: WeightUpdate, *, timeout: float) -> dict[str, float]:
        refs = {"trainer": self.trainer_handle.broadcast_staged.remote(update.version)}
        for name, handle in self._weight_receivers().items():
            refs[name] = handle.receive_broadcast.remote(update.spec, update.version)
        results = self._wait_all(refs, timeout, what=f"the broadcast of weight version {update.version}")
        return {"sync/bytes": float(results["trainer"])}

    def _wait_all(self, refs: dict[str, Any], timeout: float, *, what: str) -> dict[str, Any]:
        """Results by actor name; the first failure or a timeout names the actors concerned."""
        import time

        import ray

        names = {ref: name for name, ref in refs.items()}
        pending = list(refs.values())
        results: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                waiting = ", ".join(names[ref] for ref in pending)
                raise SyncTimeout(
                    f"{what} did not finish within {seconds_text(timeout)} (synchronizer.sync_timeout): still waiting for "
                    f"{waiting}; see their logs in the run's log/ folder"
                )
            ref = done[0]
            try:
                with actor_errors(names[ref]):
                    results[names[ref]] = ray.get(ref)
            except ComponentDied:
                raise
            except Exception as error:
                # A peer that died makes the collective fail on the others' side ("connection reset"):
                # the dead actor is the cause the user needs.
                died = _dead_actor(pending, names)
                if died is not None:
                    raise died from error
                raise
        return results

    # ------------------------------------------------------------------ tear-down
    def shutdown(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for name, handle in self.handles.items():
            try:
                ray.kill(handle)
            except Exception as error:  # already gone
                logger.debug("could not kill %s: %s", name, error)
        self.handles.clear()
        try:
            from ray.util.placement_group import remove_placement_group

            for group in self.groups:
                remove_placement_group(group)
        except Exception as error:
            logger.debug("could not remove the placement group: %s", error)
        # A joined cluster keeps running; this only disconnects from it.
        ray.shutdown()


def _dead_actor(refs: list[Any], names: dict[Any, str], wait: float = 10.0) -> ComponentDied | None:
    """The first of ``refs``' actors found dead within ``wait`` seconds, as the error naming it."""
    import ray

    done, _ = ray.wait(refs, num_returns=len(refs), timeout=wait) if refs else ([], [])
    for ref in done:
        try:
            with actor_errors(names[ref]):
                ray.get(ref)
        except ComponentDied as died:
            return died
        except Exception as error:  # noqa: BLE001 - only a dead actor matters here
            logger.debug("%s failed too: %s", names[ref], error)
    return None
