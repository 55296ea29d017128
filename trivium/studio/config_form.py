"""The config builder: its fields, generated from the schema, and the live check of what was typed.

Owns the translation between the builder's form (one text value per dotted key) and a config:
``form_fields()`` walks ``trivium.config.schema`` (keys, types, defaults, help, choices; keys
marked "(derived)" are left out, ``resolve()`` fills them); ``form_to_data()`` turns the typed
values into nested config data; ``check_form()`` runs the project's own loader, resolver,
validator and ``plan`` arithmetic on it. Nothing here knows a key's meaning except the short
list of keys the beginner mode shows.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

from trivium.config.errors import ConfigError, Problem
from trivium.config.load import load_config_from_dict, parse_override
from trivium.config.plan import explain
from trivium.config.prepare import prepare_loaded
from trivium.config.schema import TriviumConfig
from trivium.config.typecheck import schema_fields

FORM_SOURCE = "the Studio's form"

# The beginner mode: the keys a first run needs, in the order they are shown.
BEGINNER_KEYS = (
    "project",
    "name",
    "mode",
    "model.model_path",
    "model.max_prompt_tokens",
    "model.max_response_tokens",
    "buffer.explorer_input.taskset.path",
    "buffer.explorer_input.taskset.split",
    "buffer.explorer_input.taskset.format.prompt_key",
    "buffer.explorer_input.taskset.format.response_key",
    "buffer.explorer_input.default_workflow_type",
    "buffer.explorer_input.default_reward_fn_type",
    "algorithm.algorithm_type",
    "algorithm.repeat_times",
    "algorithm.optimizer.lr",
    "buffer.batch_size",
    "buffer.train_batch_size",
    "buffer.total_steps",
    "synchronizer.sync_interval",
    "buffer.trainer_input.experience_buffer.storage_type",
    "buffer.trainer_input.experience_buffer.path",
)


def starting_values(runs_root: str) -> dict[str, str]:
    """What the builder shows before anything is typed: a small colocated GRPO run on a local taskset.

    The experience buffer is a queue mirrored to SQLite inside the run directory, so its
    experiences can be browsed while the run goes and after it.
    """
    return {
        "project": "studio",
        "name": "run",
        "mode": "colocate",
        "checkpoint_root_dir": runs_root,
        "model.max_prompt_tokens": "128",
        "model.max_response_tokens": "64",
        "buffer.explorer_input.taskset.name": "train",
        "buffer.explorer_input.taskset.split": "train",
        "buffer.explorer_input.taskset.format.prompt_key": "question",
        "buffer.explorer_input.taskset.format.response_key": "answer",
        "buffer.explorer_input.default_workflow_type": "math",
        "buffer.explorer_input.default_reward_fn_type": "math_reward",
        "algorithm.algorithm_type": "grpo",
        "algorithm.repeat_times": "4",
        "algorithm.optimizer.lr": "1e-5",
        "buffer.batch_size": "4",
        "buffer.total_steps": "20",
        "synchronizer.sync_interval": "1",
        "buffer.trainer_input.experience_buffer.name": "experience_buffer",
        "buffer.trainer_input.experience_buffer.storage_type": "queue",
        "buffer.trainer_input.experience_buffer.path": "${checkpoint_root_dir}/${project}/${name}/experiences.db",
    }


@dataclass(frozen=True)
class FormField:
    key: str  # dotted path, e.g. "algorithm.optimizer.lr"
    section: str  # the top-level section it is grouped under ("" for top-level keys)
    kind: str  # "bool", "int", "float", "str", "choice" or "yaml" (lists, mappings, free-form values)
    default: str  # the schema default, as the form shows it ("" for null)
    help: str
    choices: tuple[str, ...] = ()
    required: bool = False
    nullable: bool = False


@functools.lru_cache(maxsize=1)
def form_fields() -> tuple[FormField, ...]:
    """Every settable key of the schema, in schema order."""
    return tuple(_fields_of(TriviumConfig, ""))


def fields_by_key() -> dict[str, FormField]:
    return {form_field.key: form_field for form_field in form_fields()}


def _fields_of(cls: type, prefix: str) -> list[FormField]:
    found = []
    for name, (annotation, metadata) in schema_fields(cls).items():
        key = f"{prefix}.{name}" if prefix else name
        help_text = metadata.get("help", "")
        if help_text.startswith("(derived)"):
            continue
        inner, nullable = _strip_optional(annotation)
        if dataclasses.is_dataclass(inner):
            found += _fields_of(inner, key)  # an optional section too: setting one of its keys creates it
            continue
        default = _schema_default(cls, name)
        choices = tuple(str(choice) for choice in metadata.get("choices") or ())
        found.append(FormField(
            key=key,
            section=key.split(".")[0] if prefix else "",
            kind=_kind(inner, choices, metadata),
            default=_as_text(default),
            help=help_text,
            choices=choices,
            required=bool(metadata.get("required")),
            nullable=nullable,
        ))
    return found


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        return args[0], True
    return annotation, False


def _kind(inner: Any, choices: tuple[str, ...], metadata: dict) -> str:
    if choices and not metadata.get("dotted_path"):
        return "choice"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(inner, "yaml")


def _schema_default(cls: type, name: str) -> Any:
    schema_field = cls.__dataclass_fields__[name]
    if schema_field.default is not dataclasses.MISSING:
        return schema_field.default
    return schema_field.default_factory()


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True).strip() if value else ("[]" if isinstance(value, list) else "{}")
    return str(value)


# ---- form values -> config data ------------------------------------------------------------


def form_to_data(values: dict[str, str]) -> tuple[dict, list[Problem]]:
    """Nested config data from the form's ``{dotted key: text}``; unknown keys and bad YAML are problems.

    An empty text leaves the key at its schema default. Text of ``str`` keys is taken as it
    is; other keys are read as YAML (``1e-6`` is a number, ``[1, 2]`` a list), the way
    command-line overrides are, and the loader then checks their types.
    """
    known = fields_by_key()
    schema_order = {key: index for index, key in enumerate(known)}
    data: dict = {}
    problems: list[Problem] = []
    for key in sorted(values, key=lambda key: schema_order.get(key, len(schema_order))):
        text = values[key]
        form_field = known.get(key)
        if form_field is None:
            problems.append(Problem(key, "not a key of the config schema"))
            continue
        text = "" if text is None else str(text)
        if not text.strip():
            continue
        if form_field.kind in ("str", "choice"):
            value: Any = text
        elif form_field.kind == "yaml":
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as error:
                problems.append(Problem(key, f"not valid YAML: {str(error).splitlines()[0]}"))
                continue
        else:
            value = parse_override(f"value={text}")[1]
        _put(data, key.split("."), value)
    return data, problems


def _put(data: dict, path: list[str], value: Any) -> None:
    for name in path[:-1]:
        data = data.setdefault(name, {})
    data[path[-1]] = value


def data_to_yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# ---- the live check -------------------------------------------------------------------------


@dataclass
class StagePlan:
    stage: str  # "" without stages
    text: str  # what `trivium plan` prints
    supply_per_step: int | None
    train_batch_size: int
    explorer_steps: int | None
    trainer_steps: int | None
    warnings: list[str]


@dataclass
class FormCheck:
    data: dict
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plans: list[StagePlan] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "valid": self.valid,
            "problems": [{"key": problem.key, "message": problem.message} for problem in self.problems],
            "notes": self.notes,
            "plans": [dataclasses.asdict(plan) for plan in self.plans],
            "yaml": data_to_yaml(self.data),
        }


def check_form(values: dict[str, str]) -> FormCheck:
    """Load, resolve and validate the form's config as ``trivium plan`` would, and compute its plan."""
    data, problems = form_to_data(values)
    check = FormCheck(data=data, problems=problems)
    if problems:
        return check
    try:
        stages = prepare_loaded(load_config_from_dict(data, source=FORM_SOURCE), FORM_SOURCE)
    except ConfigError as error:
        check.problems = list(error.problems)
        return check
    for stage in stages:
        config = stage.config
        plan = explain(config)
        check.plans.append(StagePlan(
            stage=config.stage_name or "",
            text=plan.render(),
            supply_per_step=plan.supply_per_step if plan.explores else None,
            train_batch_size=plan.train_batch_size,
            explorer_steps=plan.explorer_steps,
            trainer_steps=plan.trainer_steps,
            warnings=list(plan.warnings),
        ))
        where = f" (stage {config.stage_name})" if config.stage_name else ""
        check.notes += [f"{note.kind}{where}: {note.key}: {note.message}" for note in stage.notes]
    return check
