"""Ranks 1..N-1 of a data-parallel trainer as Ray actors in the run's placement groups.

When Ray places a run whose trainer has N > 1 ranks, the run's placement groups hold a bundle
per rank (in the group of the rank's machine when the trainer spans machines): the trainer actor is rank 0 and starts the others through ``RayRanks``, a
``RankLauncher`` (``trainer/rank_group.py``). Each rank is a ``TrainerRankHost`` actor in its
own bundle (its own GPU on a GPU cluster, a slice of a CPU otherwise), named
``trainer_rank_<r>`` in the run's namespace; it loads the run's plugins, then runs the same
follower loop a local rank process runs, meeting rank 0 at rank 0's node address. Ray sets
``CUDA_VISIBLE_DEVICES`` per actor, so every rank computes on its process's GPU 0.

The rank actors belong to the trainer actor: if it dies, Ray takes them down with it. The
trainer actor's watch (``trainer/rank_watch.py``) asks ``RayRanks`` whether each rank's actor
still runs, and kills them all when one is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trivium.runtime.ray_actors import ActorProcess, prepare_actor_process
from trivium.runtime.settings import RunSettings
from trivium.trainer.rank_group import follower_main
from trivium.trainer.rank_launcher import RankLauncher, Rendezvous

logger = logging.getLogger("trivium.runtime")


def rank_actor_name(rank: int) -> str:
    return f"trainer_rank_{rank}"


class TrainerRankHost(ActorProcess):
    """One follower rank of the trainer, in its own Ray worker process."""

    def __init__(self, settings: RunSettings, torch_threads: int | None):
        prepare_actor_process(settings, torch_threads)  # no queue: rank 0 hands its followers their batches

    def follow(self, rank: int, device_index: int, rendezvous: Rendezvous, follower: Callable[..., None],
               follower_args: tuple) -> None:
        """Blocks for the whole run: returns when rank 0 closes the group."""
        follower_main(rank, device_index, rendezvous, follower, follower_args)


@dataclass
class RankActor:
    rank: int
    handle: Any
    done: Any  # the reference of its ``follow`` call


@dataclass
class RayRanks(RankLauncher):
    """Starts follower rank r in ``slots[r - 1]``: a (placement group, bundle index) pair, so the
    ranks of a trainer that spans machines sit in the groups of their machines."""

    settings: RunSettings
    slots: list[tuple[Any, int]]
    cpu_slice: float
    on_gpus: bool
    torch_threads: int | None

    def rendezvous_address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def device_index(self, rank: int) -> int:
        return 0

    def launch(self, rank: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple) -> RankActor:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group, bundle = self.slots[rank - 1]
        handle = (
            ray.remote(TrainerRankHost)
            .options(
                name=rank_actor_name(rank),
                namespace=self.settings.placement.namespace,
                num_cpus=self.cpu_slice,
                num_gpus=1 if self.on_gpus else 0,
                max_concurrency=2,  # ``pid`` answers while ``follow`` runs
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=bundle
                ),
            )
            .remote(self.settings, self.torch_threads)
        )
        done = handle.follow.remote(rank, self.device_index(rank), rendezvous, follower, follower_args)
        return RankActor(rank, handle, done)

    def exit_status(self, handle: RankActor) -> str | None:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        ready, _ = ray.wait([handle.done], timeout=0)
        if not ready:
            return None
        try:
            ray.get(handle.done, timeout=0)
        except RayActorError as error:
            return f"its actor {rank_actor_name(handle.rank)} died ({type(error).__name__})"
        except RayTaskError as error:
            cause = getattr(error, "cause", None) or error
            first_line = str(cause).splitlines()[0] if str(cause) else ""
            return f"its follower loop raised {type(cause).__name__}: {first_line}"
        return "its follower loop returned before rank 0 closed the group"

    def kill(self, handle: RankActor) -> bool:
        import ray

        ray.kill(handle.handle)
        return True

    def reap(self, handles: list[RankActor], *, wait: float) -> None:
        import ray
        from ray.exceptions import RayError

        if handles:
            ray.wait([actor.done for actor in handles], num_returns=len(handles), timeout=wait)
        for rank, actor in enumerate(handles, start=1):
            try:
                ray.get(actor.done, timeout=0)
            except RayError as error:  # still running (a timeout), or it failed: either way it is stopped now
                logger.warning("trainer rank %d did not end cleanly (%s); killing its actor", rank, type(error).__name__)
            ray.kill(actor.handle)
