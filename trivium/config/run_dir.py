"""The run directory: ``<checkpoint_root_dir>/<project>/<name>/`` and ``config.resolved.yaml``.

Choosing the directory is pure (it only looks at the file system); creating it and writing
the resolved config happen in ``write_resolved``, called once the config is valid.
"""

from __future__ import annotations

import time
from pathlib import Path

from trivium.config.load import config_to_yaml
from trivium.config.schema import TriviumConfig
from trivium.errors import UserError

RESOLVED_FILE = "config.resolved.yaml"


def base_job_dir(config: TriviumConfig) -> Path:
    return Path(config.checkpoint_root_dir) / config.project / config.name


def is_used(directory: Path) -> bool:
    return directory.is_dir() and any(directory.iterdir())


def choose_run_name(config: TriviumConfig, now: float | None = None) -> str:
    """The run name: ``name``, or ``name_<timestamp>`` when starting fresh over a used directory."""
    if config.continue_from_checkpoint or not is_used(base_job_dir(config)):
        return config.name
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{config.name}_{stamp}"


def write_resolved(config: TriviumConfig) -> Path:
    """Create the run directory and write ``config.resolved.yaml`` into it; returns the file."""
    if not config.checkpoint_job_dir:
        raise ValueError("write_resolved needs a resolved config (checkpoint_job_dir is unset)")
    directory = Path(config.checkpoint_job_dir)
    path = directory / RESOLVED_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(config_to_yaml(config))
    except OSError as error:
        raise UserError(
            f"Cannot write the run directory {directory}: {error.strerror or error}. It must be writable; "
            "set checkpoint_root_dir to a writable place."
        ) from error
    return path
