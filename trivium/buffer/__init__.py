"""The buffer: experience storages (queue, sql, file), task readers, formatters, pipelines.

Everything the explorer writes and the trainer reads passes through here. Import the
entry points from this package; the modules behind them may move.
"""

from trivium.buffer.base import BufferExhausted, BufferReader, BufferWriter
from trivium.buffer.factory import create_reader, create_writer

__all__ = ["BufferExhausted", "BufferReader", "BufferWriter", "create_reader", "create_writer"]
