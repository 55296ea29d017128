"""Config checks that ask the storage kinds' traits (``trivium.core.storage_kinds``).

Owns the rules that depend on what a storage can do rather than on its name: a run that
trains on what it explores needs an experience buffer the trainer reads experiences from,
and a run whose components are separate processes needs an experience buffer they all reach.
"""

from __future__ import annotations

from trivium.config.errors import Problem
from trivium.config.schema import StorageConfig, TriviumConfig
from trivium.core.storage_kinds import kinds_with, storage_kind

EXPERIENCE_BUFFER_KEY = "buffer.trainer_input.experience_buffer"


def check_trainer_reads_experiences(storage: StorageConfig, mode: str, problems: list[Problem]) -> None:
    """The experience buffer of ``mode``, which trains on what it explores, must feed the trainer experiences."""
    if storage_kind(storage.storage_type).trainer_reads_experiences:
        return
    problems.append(
        Problem(
            f"{EXPERIENCE_BUFFER_KEY}.storage_type",
            f"'{storage.storage_type}' is for inspecting experiences in explore mode; mode '{mode}' needs "
            f"{' or '.join(repr(name) for name in kinds_with('trainer_reads_experiences'))}",
        )
    )


def check_shared_storages(config: TriviumConfig, problems: list[Problem]) -> None:
    """With separate processes (``cluster.placement: ray``), the explorer writes the experience buffer
    in one process and the trainer reads it in another, so its kind must be shared across processes."""
    storage = config.buffer.trainer_input.experience_buffer
    if not config.cluster.uses_ray or storage is None:
        return
    if not storage_kind(storage.storage_type).shared_across_processes:
        problems.append(
            Problem(
                f"{EXPERIENCE_BUFFER_KEY}.storage_type",
                f"storage_type {storage.storage_type} lives in one process, but cluster.placement: ray runs the "
                f"explorer and the trainer in separate ones; use one of "
                f"{', '.join(kinds_with('shared_across_processes'))}, or cluster.placement: process",
            )
        )
