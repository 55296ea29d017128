"""Observability: where a run's numbers and messages go, and how to look at them afterwards.

- ``create_monitor`` (factory): console line + ``metrics.jsonl`` + tensorboard / wandb / mlflow.
- ``setup_component_logger`` (logs): ``<run_dir>/log/<component>.log``.
- ``RunProgress`` (progress), ``render_summary`` (summary), ``write_plots`` (plots),
  ``write_report`` (report): progress bars, the end-of-run summary, plots and report.html.

This package reads the run directory and writes only its own files in it (metrics.jsonl,
log/, monitor/, plots/, report.html); it never touches checkpoints or the buffer.
"""

from trivium.monitor.base import Monitor, MonitorGroup
from trivium.monitor.factory import create_monitor
from trivium.monitor.logs import setup_component_logger

__all__ = ["Monitor", "MonitorGroup", "create_monitor", "setup_component_logger"]
