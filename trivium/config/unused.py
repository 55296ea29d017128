"""Keys a config sets that change nothing: reported by `trivium plan` and at the start of `trivium run`.

Two kinds: schema keys marked ``inert`` (accepted because configs of the same family use
them, with the reason they have no effect here), and entries of the veRL-style
``trainer.trainer_config`` passthrough that no trainer key stands for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from trivium.config.resolve import TRAINER_CONFIG_ALIASES
from trivium.config.schema import TriviumConfig


@dataclasses.dataclass(frozen=True)
class UnusedKey:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: accepted but not used ({self.reason})"


def unused_keys(config: TriviumConfig) -> list[UnusedKey]:
    found = list(_inert_values(config, ""))
    found.extend(_unmapped_trainer_config(config.trainer.trainer_config))
    return found


def _inert_values(node: Any, prefix: str) -> Iterator[UnusedKey]:
    if not dataclasses.is_dataclass(node):
        return
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        path = f"{prefix}{field.name}"
        reason = field.metadata.get("inert")
        if reason is not None and value != _default(field):
            yield UnusedKey(path, reason)
        if dataclasses.is_dataclass(value):
            yield from _inert_values(value, path + ".")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                yield from _inert_values(item, f"{path}[{index}].")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                yield from _inert_values(item, f"{path}.{key}.")


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _unmapped_trainer_config(extra: Any, prefix: tuple[str, ...] = ()) -> Iterator[UnusedKey]:
    if not isinstance(extra, Mapping):
        return
    for key, value in extra.items():
        path = (*prefix, str(key))
        if path in TRAINER_CONFIG_ALIASES:
            continue
        if isinstance(value, Mapping) and any(alias[: len(path)] == path for alias in TRAINER_CONFIG_ALIASES):
            yield from _unmapped_trainer_config(value, path)
            continue
        yield UnusedKey(
            "trainer.trainer_config." + ".".join(path),
            "no trainer setting stands for it; see trainer.* in docs/configuration.md",
        )
