"""Keys trivium accepts without acting on them, keys it rejects, and rollout-engine options.

Owns the reading of three schema markers (see ``schema.opt``): ``unused`` keys are stored
and listed by ``trivium plan`` when set; ``unsupported`` keys are an error when set; and
``engine_option`` keys of an inference model go to the engine factory as keywords. Nothing
here decides what an engine does with an option: engines refuse what they cannot honour.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from trivium.config.errors import Problem, Suggestion

# Engines that run on any machine and ignore vLLM's performance switches.
ENGINES_WITHOUT_VLLM_OPTIONS = ("hf", "external")


def _fields_set(node: Any, path: str) -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(key path, field, value) of every schema field whose value differs from its default."""
    if not dataclasses.is_dataclass(node):
        return
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        key = f"{path}.{f.name}" if path else f.name
        if _differs_from_default(f, value):
            yield key, f, value
        if dataclasses.is_dataclass(value):
            yield from _fields_set(value, key)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from _fields_set(item, f"{key}[{index}]")
        elif isinstance(value, dict):
            for name, item in value.items():
                yield from _fields_set(item, f"{key}.{name}")


def _differs_from_default(f: dataclasses.Field, value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        return value != f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = f.default_factory()  # type: ignore[misc]
        return not dataclasses.is_dataclass(default) and value != default
    return False


def unsupported_key_problems(config: Any, problems: list[Problem]) -> None:
    """An error for every set key the schema marks ``unsupported``, saying why."""
    for key, f, value in _fields_set(config, ""):
        reason = f.metadata.get("unsupported")
        if reason and value is not None:
            problems.append(Problem(key, f"is not supported: {reason} (got {value!r}); remove it"))


def unused_key_notes(config: Any) -> list[Suggestion]:
    """A note for every set key that nothing reads, and for engine options the engine ignores."""
    notes = []
    for key, f, _value in _fields_set(config, ""):
        if f.metadata.get("unused"):
            notes.append(Suggestion(key, f"accepted but unused: {f.metadata['unused']}", "unused"))
    for key in _unmapped_trainer_config(config.trainer.trainer_config):
        notes.append(Suggestion(
            key, "accepted but unused: no trainer setting stands for it (see trainer.* in docs/configuration.md)",
            "unused",
        ))
    for path, model in _inference_models(config):
        for name, value in engine_options(model).items():
            kind = model.__dataclass_fields__[name].metadata["engine_option"]
            if model.engine_type not in ENGINES_WITHOUT_VLLM_OPTIONS or not value:
                continue
            if kind not in ("performance", "behaviour"):
                continue  # e.g. trust_remote_code: every engine that loads weights honours it
            if kind == "performance":
                notes.append(Suggestion(
                    f"{path}.{name}", f"accepted but unused: a vLLM option the {model.engine_type} engine ignores",
                    "unused",
                ))
            else:
                notes.append(Suggestion(
                    f"{path}.{name}",
                    f"the {model.engine_type} engine cannot honour it and will refuse to start; use engine_type: vllm",
                    "note",
                ))
    return notes


def _unmapped_trainer_config(extra: Any, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Entries of the veRL-style trainer.trainer_config that no trainer key stands for."""
    from trivium.config.resolve import TRAINER_CONFIG_ALIASES

    if not isinstance(extra, Mapping):
        return
    for key, value in extra.items():
        path = (*prefix, str(key))
        if path in TRAINER_CONFIG_ALIASES:
            continue
        if isinstance(value, Mapping) and any(alias[: len(path)] == path for alias in TRAINER_CONFIG_ALIASES):
            yield from _unmapped_trainer_config(value, path)
            continue
        yield "trainer.trainer_config." + ".".join(path)


def engine_options(model: Any) -> dict[str, Any]:
    """The ``engine_option`` fields of an inference-model config whose values differ from default."""
    options = {}
    for f in dataclasses.fields(model):
        if "engine_option" in f.metadata and _differs_from_default(f, getattr(model, f.name)):
            options[f.name] = getattr(model, f.name)
    return options


def _inference_models(config: Any) -> Iterator[tuple[str, Any]]:
    yield "explorer.rollout_model", config.explorer.rollout_model
    for index, aux in enumerate(config.explorer.auxiliary_models):
        yield f"explorer.auxiliary_models[{index}]", aux
