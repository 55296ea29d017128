"""The runs under a root folder: where they are, and their status, mode, stages and progress.

A run directory is any ``<root>/<project>/<name>/`` or ``<root>/<project>/<name>/<stage>/``
holding ``config.resolved.yaml``. Its status comes from what the run leaves behind:

* ``running``: the subprocess the Studio started is alive, or (for runs started elsewhere)
  ``metrics.jsonl`` or a log changed within ``ACTIVE_SECONDS`` and no report is written yet;
* ``finished``: ``report.html`` is written (the last thing a run does), or the Studio's
  subprocess exited with 0;
* ``failed``: the Studio's subprocess exited with an error, or a log holds an ERROR record
  and no report was written; the error text comes with it;
* ``pending``: a later stage of a run the Studio started, not begun yet;
* ``stopping``: the Studio asked the run it started to stop, and it is finishing its step;
* ``stopped``: the Studio's subprocess ended on a stop signal (it resumes from its
  checkpoint), or none of the above (a run killed without a trace, or one that has not
  logged yet).

This module only reads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trivium.config.modes import EXPLORING_MODES, TRAINING_MODES
from trivium.config.run_dir import RESOLVED_FILE
from trivium.core import metric_names as names
from trivium.errors import UserError
from trivium.monitor.logs import find_log_files, read_log_records
from trivium.monitor.metrics_file import metrics_path
from trivium.studio.launch import CONFIG_FILE_NAME, STUDIO_DIR_NAME, RunLauncher, output_log_path
from trivium.studio.metrics import read_records

ACTIVE_SECONDS = 120.0
REPORT_FILE = "report.html"
ERROR_TAIL_LINES = 30


@dataclass
class RunInfo:
    run_id: str  # the path under the root, e.g. "quickstart/arithmetic/grpo"
    path: Path
    project: str
    name: str
    stage: str  # "" for a run without stages
    mode: str
    status: str  # running | stopping | finished | failed | pending | stopped
    error: str | None = None
    stoppable: bool = False  # the Studio started it and it is still going
    explore_step: int = 0
    explore_total: int | None = None
    train_step: int = 0
    train_total: int | None = None
    last_activity: float = 0.0
    stages: list[str] = field(default_factory=list)  # every stage of the run this one belongs to

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "path": str(self.path), "project": self.project, "name": self.name,
            "stage": self.stage, "mode": self.mode, "status": self.status, "error": self.error,
            "explore_step": self.explore_step, "explore_total": self.explore_total,
            "train_step": self.train_step, "train_total": self.train_total,
            "last_activity": self.last_activity, "stages": self.stages, "stoppable": self.stoppable,
        }


def find_run_dirs(root: Path) -> list[Path]:
    """Directories with a resolved config, two or three levels under ``root``.

    Also a directory the Studio started a run in whose run never wrote its resolved config
    (it stopped at its own checks): listed so its error shows.
    """
    if not root.is_dir():
        return []
    found = {path.parent for path in root.glob(f"*/*/{RESOLVED_FILE}")}
    found |= {path.parent for path in root.glob(f"*/*/*/{RESOLVED_FILE}")}
    for started in root.glob(f"*/*/{STUDIO_DIR_NAME}/{CONFIG_FILE_NAME}"):
        run_dir = started.parent.parent
        if run_dir not in found and not any(path.parent == run_dir for path in found):
            found.add(run_dir)
    return sorted(found)


def _is_run_dir(path: Path) -> bool:
    return (path / RESOLVED_FILE).is_file() or (path / STUDIO_DIR_NAME / CONFIG_FILE_NAME).is_file()


def run_path(root: Path, run_id: str) -> Path | None:
    """The directory of ``run_id`` when it is a run directory inside ``root`` (never outside it)."""
    root = root.resolve()
    candidate = (root / run_id).resolve()
    if root not in candidate.parents or not _is_run_dir(candidate):
        return None
    return candidate


def read_resolved(run_dir: Path) -> dict:
    """The run's ``config.resolved.yaml`` as plain data (else the config the Studio started it with; {})."""
    for path in (run_dir / RESOLVED_FILE, run_dir / STUDIO_DIR_NAME / CONFIG_FILE_NAME):
        if path.is_file():
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def list_runs(root: Path, launcher: RunLauncher | None = None) -> list[RunInfo]:
    """Every run under ``root``, the most recently active first."""
    runs = [run_info(root, path, launcher) for path in find_run_dirs(root)]
    return sorted(runs, key=lambda run: run.last_activity, reverse=True)


def run_info(root: Path, run_dir: Path, launcher: RunLauncher | None = None) -> RunInfo:
    config = read_resolved(run_dir)
    run_id = run_dir.resolve().relative_to(root.resolve()).as_posix()
    stage = config.get("stage_name") or ""
    stages = _stage_names(run_dir.parent) if stage else []
    info = RunInfo(
        run_id=run_id,
        path=run_dir,
        project=str(config.get("project", "")),
        name=str(config.get("name", run_dir.name)),
        stage=stage,
        mode=str(config.get("mode", "")),
        status="stopped",
        stages=stages,
        last_activity=_last_activity(run_dir),
    )
    _fill_progress(info, config, read_records(run_dir))
    _fill_status(info, run_dir, launcher)
    return info


def _stage_names(parent: Path) -> list[str]:
    """The stages of a run, in order: each stage directory's resolved config knows its place."""
    placed = []
    for directory in parent.iterdir():
        if (directory / RESOLVED_FILE).is_file():
            config = read_resolved(directory)
            if config.get("stage_name"):
                placed.append((config.get("stage_index") or 0, config["stage_name"]))
    return [name for _, name in sorted(placed)]


def _fill_progress(info: RunInfo, config: dict, records: list[dict]) -> None:
    buffer = config.get("buffer") or {}
    trainer = config.get("trainer") or {}
    for record in records:
        if record.get("role") == names.EXPLORER and names.REWARD_MEAN in record:
            info.explore_step = max(info.explore_step, int(record["step"]))
        elif record.get("role") == names.TRAINER:
            info.train_step = max(info.train_step, int(record["step"]))
    explores = info.mode in EXPLORING_MODES
    trains = info.mode in TRAINING_MODES
    if explores:
        info.explore_total = buffer.get("total_steps")
    if trains:
        info.train_total = trainer.get("total_steps")


def _fill_status(info: RunInfo, run_dir: Path, launcher: RunLauncher | None) -> None:
    started = launcher.started_run(run_dir) if launcher is not None else None
    reported = (run_dir / REPORT_FILE).is_file()
    if started is not None:
        code = started.exit_code
        info.stoppable = code is None
        if started.stopped_on_request:
            info.status = "stopped"  # it wrote its report too, but did not run to its end
        elif reported:
            info.status = "finished"
        elif code is None:
            # `trivium run` writes every stage's resolved config first; a stage has begun once it logs.
            began = metrics_path(run_dir).exists() or bool(find_log_files(run_dir))
            if started.stop_requested and began:
                info.status = "stopping"
            else:
                info.status = "running" if began or not info.stage else "pending"
        elif code == 0:
            info.status = "stopped"
        else:
            info.status = "failed"
            info.error = last_error(run_dir) or _output_tail(started.output_path)
        return
    if reported:
        info.status = "finished"
        return
    error = last_error(run_dir)
    output = output_log_path(run_dir.parent if info.stage else run_dir)
    if error is None and output.is_file() and _reports_an_error(output.read_text(errors="replace")):
        error = _output_tail(output)
    if error is not None:
        info.status, info.error = "failed", error
    elif time.time() - info.last_activity < ACTIVE_SECONDS:
        info.status = "running"


def _reports_an_error(output: str) -> bool:
    """A traceback, or the one-line error `trivium` prints for a bad config or input."""
    return "Traceback" in output or any(line.startswith("error: ") for line in output.splitlines())


def last_error(run_dir: Path) -> str | None:
    """The text of the last ERROR (or CRITICAL) record of the run's logs, if any."""
    try:
        records = read_log_records(find_log_files(run_dir))
    except (OSError, UnicodeDecodeError, UserError) as error:  # an unreadable log must not hide the run
        logging.getLogger(__name__).warning("could not read the logs of %s: %s", run_dir, error)
        return None
    errors = [record for record in records if record.level in ("ERROR", "CRITICAL")]
    return errors[-1].text if errors else None


def _output_tail(path: Path) -> str | None:
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-ERROR_TAIL_LINES:]) or None


def _last_activity(run_dir: Path) -> float:
    watched = [metrics_path(run_dir), run_dir / RESOLVED_FILE, *find_log_files(run_dir)]
    return max((path.stat().st_mtime for path in watched if path.exists()), default=0.0)
