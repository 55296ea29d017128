"""Find the run directory of an existing run, for commands that read it (``log``, ``report``).

Given ``--run-dir`` it is used as is. Given ``--config``, the directory is
``<checkpoint_root_dir>/<project>/<name>``; when a later run of the same config was moved
to ``<name>_<timestamp>`` (the directory was already used), the newest of those is taken.
A config with stages runs each stage in ``<run dir>/<stage_name>``: the stage written to
most recently is taken (``--run-dir`` picks another one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from trivium.errors import UserError


def locate_run_dir(
    *, config_path: str | Path | None = None, run_dir: str | Path | None = None, overrides: Iterable[str] = ()
) -> Path:
    if run_dir is not None:
        path = Path(run_dir)
        if not path.is_dir():
            raise UserError(f"--run-dir {path}: no such directory")
        return path
    if config_path is None:
        raise UserError("give --config FILE (the run's config) or --run-dir DIR")
    base, stage_names = configured_run_dir(config_path, overrides)
    candidates = [path for path in [base, *timestamped_siblings(base)] if path.is_dir()]
    if stage_names:
        candidates = [path / stage for path in candidates for stage in stage_names if (path / stage).is_dir()]
    if not candidates:
        expected = f"{base}/<stage>" if stage_names else str(base)
        raise UserError(
            f"no run directory for {config_path}: expected {expected} (checkpoint_root_dir/project/name). "
            "Has the run started, and from this working directory? Or give --run-dir DIR."
        )
    return max(candidates, key=_last_activity)


def configured_run_dir(config_path: str | Path, overrides: Iterable[str] = ()) -> tuple[Path, list[str]]:
    """The run directory a config names, and its stage names (empty without stages)."""
    from trivium.config.load import load_config
    from trivium.config.run_dir import base_job_dir

    if not Path(config_path).is_file():
        raise UserError(f"--config {config_path}: no such file")
    config = load_config(config_path, overrides=list(overrides))
    # A resolved config (config.resolved.yaml) names its own directory.
    base = Path(config.checkpoint_job_dir) if config.checkpoint_job_dir else base_job_dir(config)
    return base, [stage.stage_name for stage in config.stages]


def timestamped_siblings(base: Path) -> list[Path]:
    if not base.parent.is_dir():
        return []
    pattern = re.compile(re.escape(base.name) + r"_\d[\d_\-T]*$")
    return [path for path in base.parent.iterdir() if path.is_dir() and pattern.match(path.name)]


def _last_activity(path: Path) -> float:
    """Newest modification among the files a run keeps writing."""
    watched = [path / "metrics.jsonl", path / "log", path]
    return max(item.stat().st_mtime for item in watched if item.exists())


def add_run_location_arguments(parser) -> None:
    """``--config FILE [key=value ...]`` or ``--run-dir DIR``: the options every run reader takes."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="the run's config file; the run directory is derived from it")
    where.add_argument("--run-dir", help="the run directory itself (<checkpoint_root_dir>/<project>/<name>)")
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides given to the run (with --config)"
    )


def run_dir_from_args(args) -> Path:
    if args.run_dir is not None and args.overrides:
        raise UserError("KEY=VALUE overrides only apply with --config")
    return locate_run_dir(config_path=args.config, run_dir=args.run_dir, overrides=args.overrides)
