"""Data-Juicer operators in the task and experience pipelines, run in the explorer's process.

Owns building an operator once its checks pass (``data_juicer_checks.py``: why one cannot
run here; ``data_juicer_api_models.py``: the models it calls through an API, asked once
before the pipeline starts), the fields it reads, and running operators over task rows
(``DataJuicerTaskOperator``) and experiences (``DataJuicerExperienceOperator``; a recipe
file's operators: ``data_juicer_recipes.py``).

An operator reads one text field (its ``text_key``), or several at once (its ``input_keys``);
it runs once per field the pipeline names, with one worker unless its args or recipe ask
for more. Data-Juicer is imported on first use only; nothing here starts a server.
"""

from __future__ import annotations

import os
from typing import Any

from trivium.buffer.data_juicer_api_models import check_api_models
from trivium.buffer.data_juicer_checks import (
    accepted_args,
    data_juicer_operators,
    lazy_packages,
    operator_problem,
    refusal_message,
    with_defaults,
)
from trivium.buffer.operators import ExperienceOperator
from trivium.core.experience import Experience
from trivium.errors import UserError

# What a Data-Juicer operator sees of an experience: these fields, one sample per experience.
EXPERIENCE_FIELDS = ("text", "prompt_text", "response_text", "prompt", "response")
# Where a sample remembers which row or experience it came from.
_POSITION = "__trivium_position__"


def build_operator(name: str, args: dict[str, Any], *, on_experiences: bool) -> Any:
    """The Data-Juicer operator ``name`` built from ``args``; UserError with the reason when refused."""
    problem = operator_problem(name, args, on_experiences=on_experiences)
    if problem:
        raise UserError(refusal_message(name, problem))
    check_api_models(name, args)
    cls = data_juicer_operators()[name]
    for loader in lazy_packages(cls):
        loader._auto_install = False  # every package it needs is installed (checked above)
    return cls(**with_defaults(args))


def entry_problem(
    name: str, args: dict[str, Any], target_fields: list[str], *, on_experiences: bool
) -> str | None:
    """Why a pipeline entry naming the Data-Juicer operator ``name`` cannot run here, or None."""
    pipeline = "experience_pipeline" if on_experiences else "task_pipeline"
    fields = read_fields(args, target_fields)
    if on_experiences:
        fields = fields or ["text"]
        unknown = [field for field in fields if field not in EXPERIENCE_FIELDS]
        if unknown:
            return f"'{name}' reads {unknown}, which an experience does not have; it gives {list(EXPERIENCE_FIELDS)}"
    problem = operator_problem(
        name, {**args, "text_key": fields[0] if fields else "text"}, on_experiences=on_experiences
    )
    if problem:
        return refusal_message(name, problem)
    if not fields:
        return (
            f"the Data-Juicer operator '{name}' needs the fields it reads: set "
            f"data_processor.{pipeline}.target_fields (e.g. [question]) or args.text_key"
        )
    return None


def read_fields(args: dict[str, Any], fields: list[str]) -> list[str]:
    """The fields an operator reads: its ``input_keys`` (model-calling operators read several
    at once), else ``args.text_key``, else the pipeline's ``fields``."""
    if args.get("input_keys"):
        return list(args["input_keys"])
    return [args["text_key"]] if "text_key" in args else list(fields)


def operators_per_field(
    name: str, args: dict[str, Any], fields: list[str], *, on_experiences: bool
) -> list[Any]:
    """One operator per field it reads (one in all when its ``input_keys`` name several)."""
    fields = read_fields(args, fields)
    if not fields:
        raise UserError(
            f"the Data-Juicer operator '{name}' needs the field it reads: set the pipeline's "
            "target_fields, or args.text_key"
        )
    if args.get("input_keys"):
        return [build_operator(name, {**args, "text_key": fields[0]}, on_experiences=on_experiences)]
    # An operator that reads `input_keys` (default ['text']) reads the one field given to it.
    reads_input_keys = "input_keys" in accepted_args(data_juicer_operators()[name])
    return [
        build_operator(
            name,
            {**args, "text_key": field, **({"input_keys": [field]} if reads_input_keys else {})},
            on_experiences=on_experiences,
        )
        for field in fields
    ]


def run_operators(operators: list[Any], samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples that pass every operator, as the operators left them, in input order."""
    if not samples:
        return []
    from data_juicer.core.data import NestedDataset
    from datasets import Dataset

    # datasets' map with worker processes rebinds os.environ to a plain dict copy; after that,
    # environment changes would no longer reach the processes this one starts. Keep the real one.
    environment = os.environ
    try:
        dataset = NestedDataset(Dataset.from_list(samples))
        for operator in operators:
            dataset = operator.run(dataset)
            if len(dataset) == 0:
                return []
        return sorted(dataset.to_list(), key=lambda sample: sample[_POSITION])
    finally:
        os.environ = environment  # noqa: B003 - the real mapping back, not a copy


def _as_text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


class DataJuicerTaskOperator:
    """A Data-Juicer operator over taskset rows.

    Each field it reads is given to the operator as text; a filter or deduplicator drops rows,
    a mapper rewrites the field in the row the explorer reads. Batch operator: the task
    pipeline calls ``process_rows`` with every row still kept.
    """

    def __init__(self, name: str, args: dict[str, Any], fields: list[str]):
        self.name = name
        self.operators = operators_per_field(name, args, fields, on_experiences=False)
        self.fields = read_fields(args, fields)

    def process_rows(self, rows: dict[int, dict[str, Any]]) -> tuple[list[int], dict[int, dict[str, Any]]]:
        """(row numbers kept, rewritten rows by row number) for ``rows`` (row number -> row)."""
        numbers = list(rows)
        samples = [
            {**{f: _as_text(rows[n].get(f)) for f in self.fields}, _POSITION: i}
            for i, n in enumerate(numbers)
        ]
        kept, rewritten = [], {}
        for sample in run_operators(self.operators, samples):
            number = numbers[sample[_POSITION]]
            kept.append(number)
            self.kept_sample(number, sample)
            changes = {f: sample[f] for f in self.fields if sample[f] != _as_text(rows[number].get(f))}
            if changes:
                rewritten[number] = {**rows[number], **changes}
        return kept, rewritten

    def kept_sample(self, number: int, sample: dict[str, Any]) -> None:
        """Called with each kept row's number and its processed sample (subclasses read its stats)."""


def experience_sample(experience: Experience, position: int) -> dict[str, Any]:
    prompt, response = experience.prompt_text or "", experience.response_text or ""
    return {
        "text": prompt + response,
        "prompt_text": prompt,
        "response_text": response,
        "prompt": prompt,
        "response": response,
        "reward": experience.reward,
        _POSITION: position,
    }


def check_experience_fields(name: str, fields: list[str]) -> None:
    unknown = [field for field in fields if field not in EXPERIENCE_FIELDS]
    if unknown:
        raise UserError(
            f"the Data-Juicer operator '{name}' reads {unknown}; an experience gives {EXPERIENCE_FIELDS}"
        )


def kept_experiences(experiences: list[Experience], samples: list[dict[str, Any]]) -> list[Experience]:
    """The experiences of ``samples``, with the numbers Data-Juicer computed copied into ``info``."""
    from data_juicer.utils.constant import Fields

    kept = []
    for sample in samples:
        experience = experiences[sample[_POSITION]]
        for computed in (sample.get(Fields.stats) or {}, sample.get(Fields.meta) or {}):
            experience.info.update({k: v for k, v in computed.items() if isinstance(v, (int, float, str))})
        kept.append(experience)
    return kept


class DataJuicerExperienceOperator(ExperienceOperator):
    """A Data-Juicer filter, deduplicator or tagging mapper over experiences.

    Each experience is a sample with the fields of ``EXPERIENCE_FIELDS``; experiences the
    operator drops are dropped, and its stats and tags are copied into ``exp.info`` (where
    ``reward_shaping_mapper`` reads them).
    """

    def __init__(self, name: str, args: dict[str, Any], fields: list[str]):
        self.name = name
        fields = list(fields) or ["text"]
        check_experience_fields(name, read_fields(args, fields))
        self.operators = operators_per_field(name, args, fields, on_experiences=True)

    def process(self, experiences):
        samples = [experience_sample(e, i) for i, e in enumerate(experiences)]
        kept = kept_experiences(experiences, run_operators(self.operators, samples))
        return kept, {"dropped": float(len(experiences) - len(kept))}
