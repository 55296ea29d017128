"""Starting a run from the Studio: ``trivium run --config`` as a subprocess, and following it.

The run directory is chosen before the start (the same rule as ``trivium run``: ``name``, or
``name_<timestamp>`` over a used directory when not continuing) and pinned in the written
config (``name`` and ``checkpoint_job_dir``), so the run lands where the Studio looks. The
config goes to ``<run dir>/studio/config.yaml`` and the subprocess's console output to
``<run dir>/studio/run.log``. A started run outlives the Studio: it runs in its own process
group, and stopping the Studio does not stop it. The Studio can stop a run it started, as
Ctrl-C would: SIGTERM lets the current step finish, then the run saves its checkpoint,
writes its summary and exits with 130; ``continue_from_checkpoint`` resumes it. Runs started
elsewhere are stopped where they were started (the Studio does not know their processes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from trivium.config.errors import ConfigError, Problem
from trivium.config.load import load_config_from_dict
from trivium.config.prepare import prepare_loaded
from trivium.config.run_dir import choose_run_name
from trivium.errors import UserError
from trivium.runtime.stopping import INTERRUPTED_EXIT_CODE

STUDIO_DIR_NAME = "studio"
CONFIG_FILE_NAME = "config.yaml"
OUTPUT_FILE_NAME = "run.log"
SOURCE = "the Studio's config"


def studio_dir(run_dir: Path) -> Path:
    return Path(run_dir) / STUDIO_DIR_NAME


def output_log_path(run_dir: Path) -> Path:
    return studio_dir(run_dir) / OUTPUT_FILE_NAME


@dataclass
class StartedRun:
    run_dir: Path  # the run directory (with stages, the parent of the stage directories)
    config_path: Path
    output_path: Path
    process: subprocess.Popen

    stop_requested: bool = False

    @property
    def exit_code(self) -> int | None:
        """None while the subprocess runs."""
        return self.process.poll()

    @property
    def stopped_on_request(self) -> bool:
        """Ended by a stop signal (the Studio's Stop, or a signal from elsewhere)."""
        return self.exit_code == INTERRUPTED_EXIT_CODE


class RunLauncher:
    """Starts runs and remembers the ones it started (their exit codes tell finished from failed)."""

    def __init__(self, *, python: str = sys.executable, working_dir: str | Path | None = None,
                 plugin_dirs: list[str] | tuple[str, ...] = ()):
        self.python = python
        self.working_dir = Path(working_dir) if working_dir is not None else Path.cwd()
        self.plugin_dirs = [str(Path(directory).resolve()) for directory in plugin_dirs]
        self._started: dict[Path, StartedRun] = {}
        self._lock = threading.Lock()

    def start(self, data: dict) -> StartedRun:
        """Check ``data`` as ``trivium run`` would (every stage), then start it; ConfigError when invalid."""
        config = load_config_from_dict(data, source=SOURCE)
        prepare_loaded(config, SOURCE)  # raises ConfigError listing every problem
        name = config.name if config.checkpoint_job_dir else choose_run_name(config)
        run_dir = Path(config.checkpoint_job_dir or Path(config.checkpoint_root_dir) / config.project / name)
        if not run_dir.is_absolute():
            run_dir = self.working_dir / run_dir
        with self._lock:
            earlier = self._started.get(run_dir.resolve())
            if earlier is not None and earlier.exit_code is None:
                raise ConfigError(Problem("name", f"a run started here is still going in {run_dir}"), SOURCE)
            pinned = dict(data, name=name, checkpoint_job_dir=str(run_dir))
            config_path = studio_dir(run_dir) / CONFIG_FILE_NAME
            config_path.parent.mkdir(parents=True, exist_ok=True)
            config_path.write_text(yaml.safe_dump(pinned, sort_keys=False, allow_unicode=True))
            output_path = output_log_path(run_dir)
            with open(output_path, "ab") as output:
                process = subprocess.Popen(
                    [self.python, "-m", "trivium.cli.main", "run", "--config", str(config_path),
                     *[argument for directory in self.plugin_dirs for argument in ("--plugin-dir", directory)]],
                    cwd=self.working_dir,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=dict(os.environ, PYTHONUNBUFFERED="1"),
                    start_new_session=True,
                )
            started = StartedRun(run_dir=run_dir, config_path=config_path, output_path=output_path, process=process)
            self._started[run_dir.resolve()] = started
        return started

    def stop(self, run_dir: Path) -> StartedRun:
        """Ask the run this launcher started in ``run_dir`` to stop after its current step.

        UserError when the Studio did not start it or it has already ended.
        """
        started = self.started_run(run_dir)
        if started is None:
            raise UserError(f"the Studio did not start the run in {run_dir}; stop it where it was started (Ctrl-C)")
        if started.exit_code is not None:
            raise UserError(f"the run in {started.run_dir} has already ended (exit code {started.exit_code})")
        # Only the `trivium run` process: it stops its own workers and actors on the way out.
        started.process.send_signal(signal.SIGTERM)
        started.stop_requested = True
        return started

    def started_run(self, run_dir: Path) -> StartedRun | None:
        """The run this launcher started in ``run_dir`` (or in its parent, for a stage directory)."""
        run_dir = Path(run_dir).resolve()
        return self._started.get(run_dir) or self._started.get(run_dir.parent)

    def started_runs(self) -> list[StartedRun]:
        with self._lock:
            return list(self._started.values())
