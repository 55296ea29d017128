"""The disk failing under a running run, told as start-up tells it.

A run writes into its run directory until it ends: checkpoints, the explorer's position,
metrics, logs, the audit trail of trained samples. Before the run starts, a directory that
cannot be written is a config error (``config/run_dir.py``). If it becomes read-only,
vanishes or fills up while the run goes on, the ``OSError`` that surfaces (possibly as the
cause of a component's error) becomes a ``UserError`` of the same kind: the path, the
reason, the newest checkpoint that is intact, and how to go on.
"""

from __future__ import annotations

import errno
from pathlib import Path

from trivium.errors import UserError

# errno -> what to fix
WRITE_FAULTS = {
    errno.EACCES: "make it writable again",
    errno.EPERM: "make it writable again",
    errno.EROFS: "the file system is mounted read-only: remount it, or move checkpoint_root_dir",
    errno.ENOSPC: "free space on its disk, or move checkpoint_root_dir to a larger one",
    errno.EDQUOT: "free space within your disk quota, or move checkpoint_root_dir",
    errno.ENOENT: "it vanished while the run wrote into it: restore it (the checkpoints are in it)",
}


def write_fault(error: BaseException) -> OSError | None:
    """The disk fault behind ``error`` (itself, its cause or its context), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in WRITE_FAULTS and current.filename:
            return current
        current = current.__cause__ or current.__context__
    return None


def write_fault_error(fault: OSError, run_dir: Path, newest_checkpoint: int | None) -> UserError:
    path = Path(fault.filename)
    inside = path == run_dir or run_dir in path.parents
    where = f"the run directory {run_dir}" if inside else f"{path.parent}"
    saved = (
        f"The checkpoint global_step_{newest_checkpoint} is intact; once fixed, resume with "
        "continue_from_checkpoint: true."
        if newest_checkpoint is not None
        else "No checkpoint was saved yet; once fixed, start the run again."
    )
    return UserError(
        f"the run could not write {path}: {fault.strerror or fault}. {where[0].upper()}{where[1:]} must stay "
        f"writable until the run ends; {WRITE_FAULTS[fault.errno]}. {saved}"
    )
