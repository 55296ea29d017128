"""Building readers and writers from a storage config, by the kind its ``storage_type`` names.

Owns the dispatch only: the kinds, their traits and factories are registered in
``trivium.core.storage_kinds``. Configs are ``StorageConfig`` objects.
"""

from __future__ import annotations

from typing import Any

from trivium.buffer.base import BufferReader, BufferWriter
from trivium.config.schema import StorageConfig
from trivium.core.storage_kinds import storage_kind


def create_writer(config: StorageConfig) -> BufferWriter:
    return storage_kind(config.storage_type, key=f"Storage '{config.name}'").open_writer(config)


def create_reader(config: StorageConfig, **kwargs: Any) -> BufferReader:
    """A reader for ``config``.

    With a ``tokenizer`` keyword, a storage whose rows a trainer reads as a dataset (the kind
    has ``trainer_reads_experiences`` false) is read by an ``AuxiliaryBufferReader`` (SFT or
    DPO, per ``format``); otherwise the reader returns the experiences its writers wrote.
    """
    kind = storage_kind(config.storage_type, key=f"Storage '{config.name}'")
    if kwargs.get("tokenizer") is not None and not kind.trainer_reads_experiences:
        from trivium.buffer.auxiliary import AuxiliaryBufferReader

        return AuxiliaryBufferReader(config, **kwargs)
    return kind.open_reader(config)
