"""From a config file to validated, resolved configs, one per stage: what ``run`` and ``plan`` share.

Every stage is loaded, resolved and validated before anything starts, so a mistake in the
last stage is reported before the first one runs. Plugin directories are imported first, so
names they register (workflows, rewards, advantage functions, losses...) validate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from trivium.config.errors import ConfigError, Problem, Suggestion
from trivium.config.load import load_config
from trivium.config.resolve import resolve_with_notes
from trivium.config.schema import TriviumConfig
from trivium.config.stages import expand_stages
from trivium.config.validate import validate
from trivium.errors import UserError


@dataclass
class PreparedStage:
    config: TriviumConfig
    notes: list[Suggestion]  # derived-value notes and suggestions, in that order


def load_plugins(directories: Iterable[str | Path]) -> None:
    """Import every ``*.py`` of each directory (``--plugin-dir``); a missing one is a UserError."""
    from trivium.registry import load_plugin_dir

    for directory in directories:
        try:
            load_plugin_dir(directory)
        except FileNotFoundError as error:
            raise UserError(f"--plugin-dir: {error}") from None


def prepare(
    path: str | Path, overrides: Iterable[str] = (), mapping: str | Path | dict | None = None,
    plugin_dirs: Iterable[str | Path] = (),
) -> list[PreparedStage]:
    load_plugins(plugin_dirs)
    config = load_config(path, list(overrides), mapping=mapping)
    return prepare_loaded(config, str(path))


def prepare_loaded(config: TriviumConfig, source: str) -> list[PreparedStage]:
    """The stages of a config already loaded (from a file or from data in memory), checked."""
    stages = expand_stages(config)
    prepared, problems = [], []
    for stage_config in stages:
        in_stage = stage_config.stage_index is not None
        prefix = f"in stage '{stage_config.stage_name}': " if in_stage else ""
        try:
            resolved, notes = resolve_with_notes(stage_config)
            notes = notes + validate(resolved)
        except ConfigError as error:
            problems += [Problem(p.key, prefix + p.message) for p in error.problems]
            continue
        prepared.append(PreparedStage(resolved, notes))
    if problems:
        raise ConfigError(problems, source)
    return prepared
