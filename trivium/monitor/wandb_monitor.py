"""Weights & Biases runs ``<name>_explorer`` / ``<name>_trainer`` in project ``<project>``.

Files go to ``<run_dir>/monitor/wandb/``. The mode comes from ``monitor_args.mode``, else
``WANDB_MODE``, else ``online`` when an API key is visible (``monitor_args.api_key``,
``WANDB_API_KEY`` or a ``wandb login`` entry in ~/.netrc) and ``offline`` otherwise, so a
machine without credentials still records the run and can ``wandb sync`` it later.
"""

from __future__ import annotations

import logging
import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trivium.monitor.base import MONITOR_BACKENDS
from trivium.monitor.optional_backend import BackendRun, OptionalPackageBackend

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.wandb.ai"
ACCEPTED_ARGS = ("base_url", "api_key", "mode", "entity", "tags")


def wandb_dir(run_dir: str | Path) -> Path:
    """wandb adds its own ``wandb/`` folder inside the directory it is given."""
    return Path(run_dir) / "monitor"


@MONITOR_BACKENDS.register("wandb")
class WandbMonitor(OptionalPackageBackend):
    monitor_type = package_module = "wandb"
    accepted_args = ACCEPTED_ARGS

    def start(self, run: BackendRun) -> None:
        import wandb

        monitor_args = run.monitor_args
        base_url = monitor_args.get("base_url") or os.environ.get("WANDB_BASE_URL")
        api_key = monitor_args.get("api_key") or os.environ.get("WANDB_API_KEY")
        mode = resolve_wandb_mode(monitor_args.get("mode"), api_key, base_url)

        settings: dict[str, Any] = {"console": "off"}  # our own log files already hold the output
        if base_url:
            settings["base_url"] = base_url
        if api_key:
            settings["api_key"] = api_key
        directory = wandb_dir(run.run_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=run.project,
            entity=monitor_args.get("entity"),
            name=run.run_name,
            # explorer and trainer: one experiment
            group=run.group or run.run_name.removesuffix(f"_{run.role}"),
            job_type=run.role,
            tags=monitor_args.get("tags"),
            dir=str(directory),
            config=run.config_dict,
            mode=mode,
            reinit="create_new",  # the explorer and the trainer may share one process
            settings=wandb.Settings(**settings),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


def resolve_wandb_mode(requested: str | None, api_key: str | None, base_url: str | None) -> str:
    mode = requested or os.environ.get("WANDB_MODE")
    if mode:
        return mode
    if api_key or _netrc_has_key(base_url or DEFAULT_BASE_URL):
        return "online"
    logger.warning(
        "wandb: no API key found (monitor_args.api_key, WANDB_API_KEY or `wandb login`); "
        "recording offline under the run directory. Upload later with `wandb sync`."
    )
    return "offline"


def _netrc_has_key(base_url: str) -> bool:
    host = urlparse(base_url).hostname or base_url
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
