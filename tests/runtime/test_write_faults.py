"""Disk faults under a running run become one message: path, reason, the intact checkpoint."""

import errno
from pathlib import Path

from trivium.runtime.write_faults import write_fault, write_fault_error

RUN_DIR = Path("/runs/demo/grpo")


def raised_from(cause: BaseException) -> RuntimeError:
    try:
        try:
            raise cause
        except OSError as error:
            raise RuntimeError("the trainer failed") from error
    except RuntimeError as wrapped:
        return wrapped


def test_the_fault_is_found_behind_a_component_error():
    fault = PermissionError(errno.EACCES, "Permission denied", str(RUN_DIR / "explorer_state.tmp"))
    assert write_fault(raised_from(fault)) is fault


def test_errors_that_are_not_disk_faults_are_left_alone():
    assert write_fault(RuntimeError("nan loss")) is None
    assert write_fault(ConnectionResetError(errno.ECONNRESET, "reset by peer")) is None
    assert write_fault(PermissionError(errno.EACCES, "no path")) is None  # nothing to name


def test_a_read_only_run_directory_names_the_file_and_the_checkpoint_to_resume_from():
    fault = PermissionError(errno.EACCES, "Permission denied", str(RUN_DIR / "explorer_state.tmp"))
    message = str(write_fault_error(fault, RUN_DIR, 4))
    assert message == (
        f"the run could not write {RUN_DIR}/explorer_state.tmp: Permission denied. The run directory {RUN_DIR} "
        "must stay writable until the run ends; make it writable again. The checkpoint global_step_4 is intact; "
        "once fixed, resume with continue_from_checkpoint: true."
    )


def test_a_full_disk_outside_the_run_directory_says_where_and_that_nothing_was_saved_yet():
    fault = OSError(errno.ENOSPC, "No space left on device", "/scratch/staged/weights.safetensors")
    message = str(write_fault_error(fault, RUN_DIR, None))
    assert "could not write /scratch/staged/weights.safetensors: No space left on device" in message
    assert "/scratch/staged must stay writable" in message and "free space on its disk" in message
    assert message.endswith("No checkpoint was saved yet; once fixed, start the run again.")
