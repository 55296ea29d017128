"""``monitor.enable_ray_timeline``: Ray's task timeline as ``<run_dir>/monitor/timeline.json``.

Open the file in chrome://tracing or https://ui.perfetto.dev to see which actor ran what,
and when. The timeline only exists when the run placed its components as Ray actors.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

TIMELINE_FILE_NAME = "timeline.json"


def timeline_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "monitor" / TIMELINE_FILE_NAME


def export_ray_timeline(run_dir: str | Path) -> Path | None:
    """Write the timeline and return its path; ``None`` (with a note in the log) without Ray."""
    # Look for Ray without importing it: if nobody imported it, it cannot be running.
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        logger.warning(
            "monitor.enable_ray_timeline is set, but Ray is not running in this process, so there "
            "is no timeline to export. It is written for runs whose components run as Ray actors."
        )
        return None
    path = timeline_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    ray.timeline(filename=str(path))
    logger.info("Ray timeline written to %s", path)
    return path
