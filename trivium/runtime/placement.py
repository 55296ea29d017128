"""What a placement is: where a run's explorer side and trainer side live, from start to end.

A placement builds the trainer side (handing it the synchronizer's weight transport) and
the explorer side (handing it the rollout engines), and owns start-up and shut-down of
whatever hosts them. ``cluster.placement`` names one in ``PLACEMENT_TYPES`` (``resolve()`` turns
``auto`` into this process or Ray): ``process`` (``local_placement.py``) and ``ray``
(``ray_placement.py``). A plugin subclasses ``Placement`` in a module of its own and is named
by its dotted path (``my_placement:MyPlacement``, with ``--plugin-dir``) or registered by name.
The session asks a placement for these and its traits, never which one it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from trivium.registry import Registry

if TYPE_CHECKING:
    from trivium.runtime.settings import RunSettings
    from trivium.runtime.worker_sides import ExplorerSide, TrainerSide
    from trivium.sync.transport import WeightBroadcaster, WeightTransport


class Placement(ABC):
    # Whether the two sides live in processes of their own (no memory shared with this one).
    separate_processes: ClassVar[bool] = False

    def __init__(self, settings: RunSettings):
        """Start whatever hosts the run's components (a Ray instance, resources, shared queues)."""
        self.settings = settings

    @abstractmethod
    def trainer(self, resume_step: int | None, transport: WeightTransport) -> TrainerSide:
        """The trainer side, resumed from checkpoint ``resume_step`` when given."""

    @abstractmethod
    def explorer(self) -> ExplorerSide:
        """The explorer side, with its rollout engines."""

    def weight_broadcaster(self) -> WeightBroadcaster | None:
        """What runs a broadcast between the sides' processes; None when the placement has none."""
        return None

    def placed(self) -> None:
        """Both sides are started; wait until they are built (a placement may record where they
        landed). The weight transport connects them after."""

    def shutdown(self) -> None:
        """Stop what ``__init__`` started; the sides are closed already."""


PLACEMENT_TYPES: Registry[type[Placement]] = Registry(
    "placement", builtin_modules=("trivium.runtime.local_placement", "trivium.runtime.ray_placement")
)


def create_placement(settings: RunSettings) -> Placement:
    return PLACEMENT_TYPES.get(settings.placement.name)(settings)
