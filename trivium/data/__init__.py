"""Generated task datasets (arithmetic, countdown, frozen_lake, guessing) for local runs and tests."""

from trivium.data.builder import FORMATS, TASK_GENERATORS, build_task_data, task_options

__all__ = ["FORMATS", "TASK_GENERATORS", "build_task_data", "task_options"]
