"""Where the ranks of a data-parallel trainer meet (``Rendezvous``) and the interface of
whatever starts them (``RankLauncher``): local processes (``rank_group.LocalProcesses``), Ray
actors (``runtime/ray_trainer_ranks.py``) or torchrun's processes (``torchrun_ranks.py``).
The rank group starts ranks through it and its watch (``rank_watch.py``) asks it whether they
still run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trivium.sync.collective import free_port


@dataclass(frozen=True)
class Rendezvous:
    """Where and how the ranks of one trainer meet; ``timeout`` bounds each collective."""

    address: str
    port: int
    world_size: int
    device_type: str
    timeout: float


class RankLauncher:
    """Starts ranks 1..N-1 of a trainer somewhere, tells whether they still run, and reaps them."""

    def rendezvous_address(self) -> str:
        """The host of rank 0 as the other ranks reach it."""
        raise NotImplementedError(f"{type(self).__name__} must implement rendezvous_address()")

    def rendezvous_port(self, address: str) -> int:
        return free_port(address)

    def device_index(self, rank: int) -> int:
        """The GPU index ``rank`` computes on, among the GPUs its process sees."""
        return rank

    def launch(
        self, rank: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple
    ) -> Any:
        """Start ``rank`` running ``follower(group, *follower_args)``; returns a handle for ``reap``."""
        raise NotImplementedError(f"{type(self).__name__} must implement launch()")

    def reap(self, handles: list[Any], *, wait: float) -> None:
        """Wait up to ``wait`` seconds for the ranks to return, then stop any that did not."""
        raise NotImplementedError(f"{type(self).__name__} must implement reap()")

    def exit_status(self, handle: Any) -> str | None:
        """How the rank ended (``killed by SIGKILL``); None while it runs, or if the launcher cannot tell."""
        return None

    def process_id(self, handle: Any) -> int | None:
        """The rank's pid, if the launcher knows it before the rank says it."""
        return None

    def kill(self, handle: Any) -> bool:
        """Stop the rank at once; False when this launcher cannot (its pid is then killed on this machine)."""
        return False
