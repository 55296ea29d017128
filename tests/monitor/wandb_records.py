"""Read a wandb offline run file (``run-<id>.wandb``) into wandb's own protobuf records.

The file is wandb's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
then the LevelDB log format: 32 KiB blocks of chunks, each with a 7-byte header (CRC32,
little-endian length, type FULL=1/FIRST=2/MIDDLE=3/LAST=4). Each assembled payload is a
``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
from pathlib import Path

FILE_HEADER = 7
BLOCK_SIZE = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_payloads(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    payloads, pending = [], b""
    position = FILE_HEADER
    while position + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK_SIZE - position % BLOCK_SIZE
        if left_in_block < CHUNK_HEADER:  # block trailer padding
            position += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + CHUNK_HEADER])
        chunk = data[position + CHUNK_HEADER : position + CHUNK_HEADER + length]
        position += CHUNK_HEADER + length
        if kind == FULL:
            payloads.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            payloads.append(pending + chunk)
        elif kind == 0 and length == 0:  # zero padding at the end of a preallocated block
            position += left_in_block - CHUNK_HEADER
    return payloads


def read_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    records = []
    for payload in read_payloads(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records
