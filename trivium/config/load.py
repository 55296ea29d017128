"""Loading: YAML file (+ optional upper-level mapping) + command-line overrides -> TriviumConfig.

Precedence, lowest first: schema defaults < values mapped from an upper-level tool's config
(``--map``) < the file (or its ``trivium:`` passthrough section) < ``key=value`` overrides.
Interpolations (``${a.b}``, ``${oc.env:VAR,default}``) are resolved after all layers are
merged, so an override of ``a.b`` is seen by every ``${a.b}``. Derived values are not
filled here: that is ``resolve()``'s job.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trivium.config.errors import ConfigError, Problem
from trivium.config.key_mapping import apply_mapping
from trivium.config.key_paths import check_key_path
from trivium.config.schema import TriviumConfig
from trivium.config.typecheck import build_dataclass, check_keys, check_values
from trivium.errors import utf8_problem

PASSTHROUGH_KEY = "trivium"
MappingFn = Callable[[dict, dict], dict]



class _OverrideLoader(yaml.SafeLoader):
    """YAML for override values; unlike plain YAML 1.1 it reads 1e-6 as a number, as OmegaConf does."""


_OverrideLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789.")
)


def load_config(
    path: str | Path,
    overrides: Iterable[str] = (),
    mapping: dict | str | Path | None = None,
    mapping_fn: MappingFn | None = None,
) -> TriviumConfig:
    """Read a config file into a TriviumConfig (not yet resolved).

    ``mapping`` (a dict or a JSON file) maps an upper-level tool's keys onto ours; it is
    applied with ``trivium.config.key_mapping.apply_mapping`` unless ``mapping_fn`` is given.
    A file with a top-level ``trivium:`` section is read as an upper-level tool's config:
    only that section (and the mapped values) configure trivium.
    """
    source = str(path)
    document = _read_yaml(Path(path))
    layers: list[tuple[str, Any]] = []
    if mapping is not None or PASSTHROUGH_KEY in document:
        if mapping is not None:
            mapping_dict, mapping_source = _read_mapping(mapping)
            upper = _resolve_container(document, source)
            mapped = (mapping_fn or apply_mapping)(upper, mapping_dict)
            layers.append((f"values mapped by {mapping_source}", mapped))
        if PASSTHROUGH_KEY in document:
            # Interpolations in the passthrough section may refer to the upper tool's keys.
            section = _resolve_container(document, source, node=document[PASSTHROUGH_KEY])
            layers.append((f"{source} ('{PASSTHROUGH_KEY}:' section)", section or {}))
    else:
        layers.append((source, OmegaConf.to_container(document, resolve=False)))
    return build_config(layers, overrides, source)


def load_config_from_dict(data: dict, overrides: Iterable[str] = (), source: str = "<dict>") -> TriviumConfig:
    """Same as load_config for data already in memory (tests, the studio, importers)."""
    return build_config([(source, data)], overrides, source)


def build_config(layers: list[tuple[str, Any]], overrides: Iterable[str], source: str) -> TriviumConfig:
    problems: list[Problem] = []
    for label, data in layers:
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"the top level must be a mapping of sections, got {type(data).__name__}", label)
        for problem in check_keys(data or {}, TriviumConfig):
            problems.append(Problem(problem.key, f"{problem.message} (from {label})") if label != source else problem)
    parsed_overrides = [parse_override(text) for text in overrides]
    for key, _ in parsed_overrides:
        problem = check_key_path(key)
        if problem:
            problems.append(Problem(key, f"{problem} (from a command-line override)"))
    if problems:
        raise ConfigError(problems, source)

    combined = schema_defaults()
    for _, data in layers:
        combined = deep_merge(combined, data or {})
    merged = OmegaConf.create(combined)
    for key, value in parsed_overrides:
        _apply_override(merged, key, value, source)

    plain = _resolve_container(merged, source)
    normalized = check_values(plain, TriviumConfig, "", problems)
    if problems:
        raise ConfigError(problems, source)
    return to_config(normalized, source)


def to_config(data: dict, source: str = "<dict>") -> TriviumConfig:
    """Plain, checked data -> TriviumConfig dataclass (defaults fill what is missing)."""
    try:
        return build_dataclass(TriviumConfig, data)
    except ConfigError as error:
        raise ConfigError(error.problems, source) from None


def config_to_dict(config: TriviumConfig) -> dict:
    return dataclasses.asdict(config)


def config_to_yaml(config: TriviumConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(config_to_dict(config)))


def deep_merge(base: Any, override: Any) -> Any:
    """Mappings merge key by key; anything else (lists included) is replaced. Inputs are not changed."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return override


def schema_defaults() -> dict:
    return config_to_dict(TriviumConfig())


# ---------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b[0].c=value`` -> ("a.b[0].c", parsed YAML value). Hydra's + / ++ prefixes are accepted."""
    if "=" not in text:
        raise ConfigError(
            Problem(text, "a command-line override must look like key=value, e.g. algorithm.repeat_times=8")
        )
    key, _, raw_value = text.partition("=")
    key = key.strip().lstrip("+")
    if not key:
        raise ConfigError(Problem(text, "the override has an empty key; write key=value"))
    try:
        value = yaml.load(raw_value, Loader=_OverrideLoader) if raw_value.strip() else ""
    except yaml.YAMLError:
        value = raw_value  # not YAML: keep the text as a string
    return key, value


def _apply_override(merged: DictConfig, key: str, value: Any, source: str) -> None:
    try:
        OmegaConf.update(merged, key, value, merge=True, force_add=True)
    except (OmegaConfBaseException, IndexError, KeyError) as error:
        raise ConfigError(Problem(key, f"cannot apply the command-line override: {_first_line(error)}"), source) from None


# ---------------------------------------------------------------- files


def _read_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    problem = utf8_problem(path.read_bytes())
    if problem:
        raise ConfigError(f"the file is not UTF-8 text: {problem}; save it as UTF-8", str(path))
    try:
        document = OmegaConf.load(path)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"cannot parse YAML{where}: {problem}", str(path)) from None
    except OmegaConfBaseException as error:
        raise ConfigError(_first_line(error), str(path)) from None
    if isinstance(document, ListConfig):
        raise ConfigError("the top level must be a mapping of sections, got a list", str(path))
    return document


def _read_mapping(mapping: dict | str | Path) -> tuple[dict, str]:
    if isinstance(mapping, dict):
        return mapping, "the key mapping"
    path = Path(mapping)
    if not path.is_file():
        raise ConfigError(f"key-mapping file not found: {path}")
    try:
        return json.loads(path.read_text()), str(path)
    except json.JSONDecodeError as error:
        raise ConfigError(f"the key-mapping file is not valid JSON: {error}", str(path)) from None


def _resolve_container(config: Any, source: str, node: Any = None) -> Any:
    """Resolve every interpolation; a failure names the key and what to set."""
    target = config if node is None else node
    if not isinstance(target, (DictConfig, ListConfig)):
        return target
    try:
        return OmegaConf.to_container(target, resolve=True)
    except OmegaConfBaseException as error:
        key = str(getattr(error, "full_key", "") or "")
        message = _first_line(error)
        env = re.search(r"Environment variable '([^']+)' not found", message)
        if env:
            message = (
                f"environment variable {env.group(1)} is not set; export it, or give a default "
                f"like ${{oc.env:{env.group(1)},VALUE}}"
            )
        else:
            message = f"cannot resolve interpolation: {message}"
        raise ConfigError(Problem(key, message), source) from None


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
