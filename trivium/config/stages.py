"""Stages: one config with ``stages:`` becomes one config per stage, run in order.

A stage's sections are merged key by key over the global ones (lists are replaced). Stage
runs are named ``<name>/<stage_name>``, so every stage lives in its own subdirectory of the
run directory: ``<checkpoint_root_dir>/<project>/<name>/<stage_name>/``. Unless a stage
sets ``model.model_path`` (or ``init_from_previous_stage: false``), it starts from the
previous stage's final weights: the expanded config records the previous stage's run
directory, and ``use_previous_stage_weights`` points model.model_path at the newest
Hugging Face export there once that stage has finished.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from trivium.config.errors import ConfigError, Problem
from trivium.config.load import config_to_dict, deep_merge, to_config
from trivium.config.run_dir import choose_run_name
from trivium.config.schema import TriviumConfig
from trivium.config.typecheck import check_keys, check_values, join

STAGE_SECTIONS = ("algorithm", "buffer", "explorer", "trainer", "model", "synchronizer")
_STEP_DIR = re.compile(r"global_step_(\d+)$")


def expand_stages(config: TriviumConfig) -> list[TriviumConfig]:
    """One config per stage (or ``[config]`` without stages), each still to be resolved."""
    if not config.stages:
        return [copy.deepcopy(config)]
    _check_stage_names(config)
    base_name = config.name if config.checkpoint_job_dir else choose_run_name(config)
    base_dir = Path(config.checkpoint_root_dir) / config.project / base_name
    global_data = config_to_dict(config)
    global_data["stages"] = []
    expanded: list[TriviumConfig] = []
    problems: list[Problem] = []
    for index, stage in enumerate(config.stages):
        stage_key = f"stages[{index}]"
        data = copy.deepcopy(global_data)
        stage_has_unknown_keys = False
        if stage.mode is not None:
            data["mode"] = stage.mode
        for section in STAGE_SECTIONS:
            override = getattr(stage, section)
            if not override:
                continue
            key_problems = check_keys({section: override}, TriviumConfig, stage_key)
            problems += key_problems
            stage_has_unknown_keys = stage_has_unknown_keys or bool(key_problems)
            data[section] = deep_merge(data[section], override)
        data["name"] = f"{base_name}/{stage.stage_name}"
        data["checkpoint_job_dir"] = str(base_dir / stage.stage_name)
        data["ray_namespace"] = None if config.ray_namespace is None else f"{config.ray_namespace}/{stage.stage_name}"
        data["stage_index"] = index
        data["stage_name"] = stage.stage_name
        overrides_model_path = bool(stage.model and "model_path" in stage.model)
        if index > 0 and stage.init_from_previous_stage and not overrides_model_path:
            data["previous_stage_job_dir"] = expanded[-1].checkpoint_job_dir
        stage_problems: list[Problem] = []
        normalized = check_values(data, TriviumConfig, "", stage_problems)
        problems += [Problem(join(stage_key, p.key), p.message) for p in stage_problems]
        if not stage_problems and not stage_has_unknown_keys:
            expanded.append(to_config(normalized, stage_key))
    if problems:
        raise ConfigError(problems)
    return expanded


def _check_stage_names(config: TriviumConfig) -> None:
    problems, seen = [], set()
    for index, stage in enumerate(config.stages):
        name = stage.stage_name
        if not name:
            problems.append(Problem(f"stages[{index}].stage_name", "every stage needs a stage_name"))
        elif name in seen:
            problems.append(Problem(f"stages[{index}].stage_name", f"'{name}' is used by an earlier stage; names must be unique"))
        elif not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            problems.append(Problem(f"stages[{index}].stage_name", f"'{name}' may use only letters, digits, '_', '-' and '.'"))
        seen.add(name)
    if problems:
        raise ConfigError(problems)


def latest_weights_dir(job_dir: str | Path) -> Path | None:
    """The newest ``global_step_<N>`` model directory holding a config.json, or None."""
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        return None
    steps = sorted(
        ((int(match.group(1)), path) for path in job_dir.iterdir() if (match := _STEP_DIR.search(path.name))),
        reverse=True,
    )
    for _, step_dir in steps:
        for candidate in ("actor/huggingface", "actor/hf", "huggingface", "actor", "."):
            if (step_dir / candidate / "config.json").is_file():
                return (step_dir / candidate).resolve()
    return None


def use_previous_stage_weights(config: TriviumConfig) -> TriviumConfig:
    """Point model.model_path at the previous stage's final weights (call once it has finished)."""
    if not config.previous_stage_job_dir:
        return config
    weights = latest_weights_dir(config.previous_stage_job_dir)
    if weights is None:
        raise ConfigError(Problem(
            f"stages[{config.stage_index}]",
            f"starts from the previous stage's weights, but no model export was found under "
            f"{config.previous_stage_job_dir}/global_step_*/; let that stage save one (trainer.save_hf_checkpoint: "
            "last), or set model.model_path (or init_from_previous_stage: false) in this stage",
        ))
    config = copy.deepcopy(config)
    old_path = config.model.model_path
    config.model.model_path = str(weights)
    # Derived copies of the old path follow it; paths set on purpose stay.
    if config.explorer.rollout_model.model_path in (None, old_path):
        config.explorer.rollout_model.model_path = str(weights)
    if config.model.critic_model_path in (None, old_path):
        config.model.critic_model_path = str(weights)
    if config.model.tinker.enable and config.model.tinker.base_model in (None, old_path):
        config.model.tinker.base_model = str(weights)
    return config
