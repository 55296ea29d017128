"""Building readers and writers from a storage config (``storage_type`` file|queue|sql).

Owns the choice of implementation only. Configs are duck-typed: any object with the
``StorageConfig`` attributes works.
"""

from __future__ import annotations

from typing import Any

from trivium.buffer.base import DEFAULT_READ_TIMEOUT, BufferReader, BufferWriter, option
from trivium.errors import UserError

STORAGE_TYPES = ("queue", "sql", "file")


def _storage_type(config: Any) -> str:
    storage_type = str(option(config, "storage_type", "queue")).lower()
    if storage_type not in STORAGE_TYPES:
        raise UserError(
            f"Storage '{option(config, 'name', '?')}': unknown storage_type {storage_type!r}; "
            f"choose one of {', '.join(STORAGE_TYPES)}."
        )
    return storage_type


def create_writer(config: Any) -> BufferWriter:
    storage_type = _storage_type(config)
    if storage_type == "queue":
        from trivium.buffer.queue_storage import QueueWriter, get_queue

        return QueueWriter(get_queue(config))
    if storage_type == "sql":
        from trivium.buffer.sql_storage import SQLWriter

        return SQLWriter.from_config(config)
    from trivium.buffer.file_storage import JsonlWriter, experience_file

    return JsonlWriter(experience_file(config))


def create_reader(config: Any, **kwargs: Any) -> BufferReader:
    """A reader for ``config``.

    For ``file`` storage with a ``tokenizer`` keyword, the file is a dataset (SFT or DPO,
    per ``format``) and the reader is an ``AuxiliaryBufferReader``; without one it reads
    experiences written by the ``file`` writer.
    """
    storage_type = _storage_type(config)
    if storage_type == "queue":
        from trivium.buffer.queue_storage import QueueReader, get_queue

        timeout = float(option(config, "max_read_timeout", DEFAULT_READ_TIMEOUT))
        return QueueReader(get_queue(config), max_read_timeout=timeout)
    if storage_type == "sql":
        from trivium.buffer.sql_storage import SQLReader

        return SQLReader.from_config(config)
    if kwargs.get("tokenizer") is not None:
        from trivium.buffer.auxiliary import AuxiliaryBufferReader

        return AuxiliaryBufferReader(config, **kwargs)
    from trivium.buffer.file_storage import JsonlReader, experience_file

    return JsonlReader(experience_file(config))
