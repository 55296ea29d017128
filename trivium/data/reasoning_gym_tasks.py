"""Task rows from reasoning-gym's procedural datasets (``trivium init data --task reasoning_gym:NAME``).

Owns the ``reasoning_gym:`` task prefix, the dataset-name check (with close names from
reasoning-gym's registry), the dataset config given as ``key=value`` options, and row
generation. Scoring lives in ``trivium.rewards.reasoning_gym_reward``; the two share only
the ground-truth layout written here.

A row has ``prompt`` (the entry's question), ``response`` (JSON text of the ground truth:
``{"dataset", "config", "entry": {"question", "answer", "metadata"}}``, everything
``score_answer`` needs), ``reference_answer`` (the entry's answer, or "" when the dataset
has none), ``sft_response`` (``<answer>reference</answer>``, a warm-up target), ``dataset``
and ``item_seed``. ``prompt`` and ``response`` are the columns ``format.prompt_key`` and
``format.response_key`` name by default, so a taskset needs no ``format`` section.

reasoning-gym draws item ``i`` of a dataset seeded ``s`` from seed ``s + i``; train takes
the first items and test the later ones, so their item seeds never overlap, and an item
whose question repeats an earlier one is skipped. Each stored entry is checked to score its
reference answer as the generated one does (metadata that JSON changes is refused). The
package is imported on first use, under a lock shared by every caller in the process.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import threading
from types import ModuleType
from typing import Any

from trivium.data.prompts import answer_response
from trivium.errors import UserError

REASONING_GYM_PREFIX = "reasoning_gym:"
# Set by ``trivium init data`` itself (--seed, --num-train/--num-test), never by an option.
_MANAGED_FIELDS = ("seed", "size")
# Items drawn per wanted row before we decide the dataset has too few distinct questions.
_ATTEMPTS_PER_ROW = 20
# Runner threads score their first replies at the same time; one of them imports the package
# while the others wait, so none sees its dataset registry half filled.
_IMPORT_LOCK = threading.Lock()


def load_reasoning_gym() -> ModuleType:
    """The ``reasoning_gym`` package, fully imported (every dataset registered)."""
    with _IMPORT_LOCK:
        import reasoning_gym

    return reasoning_gym


def is_reasoning_gym_task(task: str) -> bool:
    return task.startswith(REASONING_GYM_PREFIX)


def dataset_names() -> list[str]:
    return sorted(load_reasoning_gym().factory.DATASETS)


def check_dataset_name(name: str) -> None:
    """Refuse a name reasoning-gym does not register, suggesting the closest registered ones."""
    names = dataset_names()
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    hint = f"Did you mean: {', '.join(close)}?" if close else f"Registered datasets: {', '.join(names)}."
    raise UserError(f"reasoning-gym has no dataset '{name}' (--task {REASONING_GYM_PREFIX}{name}). {hint}")


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["max_terms=2", 'operators=["+"]']`` -> ``{"max_terms": 2, "operators": ["+"]}``.

    A value is read as JSON when it parses (numbers, true/false, lists), else kept as text.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise UserError(f"--option takes KEY=VALUE, got '{pair}' (for example --option max_terms=2).")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def config_fields(name: str) -> list[str]:
    """The config keys a dataset accepts as options (its config dataclass fields but seed and size)."""
    config_class = load_reasoning_gym().factory.DATASETS[name][1]
    return [field.name for field in dataclasses.fields(config_class) if field.name not in _MANAGED_FIELDS]


def check_config(name: str, config: dict[str, Any]) -> None:
    """Refuse options the dataset's config does not have, and values its own check rejects."""
    check_dataset_name(name)
    accepted = config_fields(name)
    for key in config:
        if key in _MANAGED_FIELDS:
            raise UserError(
                f"--option {key}=... is set by trivium init data; use --seed and --num-train/--num-test."
            )
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise UserError(
                f"reasoning-gym dataset '{name}' has no config option '{key}'.{hint} "
                f"It accepts: {', '.join(accepted) or '(none)'}."
            )
    dataset = create_dataset(name, config, seed=0, size=1)
    try:
        dataset[0]
    except (AssertionError, TypeError, ValueError) as error:
        raise UserError(
            f"reasoning-gym dataset '{name}' cannot draw an item with config {json.dumps(config)}: "
            f"{error or type(error).__name__}. Change the --option values."
        ) from None


def create_dataset(name: str, config: dict[str, Any], *, seed: int, size: int):
    """reasoning-gym's dataset ``name`` built from ``config``; a rejected config is a UserError."""
    try:
        return load_reasoning_gym().create_dataset(name, seed=seed, size=size, **config)
    except (AssertionError, TypeError, ValueError) as error:
        raise UserError(
            f"reasoning-gym dataset '{name}' rejects config {json.dumps(config)}: "
            f"{error or type(error).__name__}. Change the --option values."
        ) from None


def entry_row(name: str, config: dict[str, Any], entry: dict[str, Any], item_seed: int) -> dict:
    ground_truth = {
        "dataset": name,
        "config": config,
        "entry": {"question": entry["question"], "answer": entry["answer"], "metadata": entry["metadata"]},
    }
    reference = "" if entry["answer"] is None else str(entry["answer"])
    return {
        "prompt": entry["question"],
        # JSON text, so the column has one type in every row whatever the metadata holds.
        "response": json.dumps(ground_truth, ensure_ascii=False, default=str),
        "reference_answer": reference,
        "sft_response": answer_response(reference),
        "dataset": name,
        "item_seed": item_seed,
    }


def check_stored_entry_scores_alike(dataset, entry: dict, stored: dict, name: str) -> None:
    """Refuse a dataset whose metadata changes meaning in JSON (tuples, objects): its verifier
    would score the stored entry differently from the one it generated."""
    if entry["answer"] is None:
        return
    reference = str(entry["answer"])
    if dataset.score_answer(reference, stored) != dataset.score_answer(reference, entry):
        raise UserError(
            f"reasoning-gym dataset '{name}' keeps metadata that does not survive being written as JSON: "
            "its verifier scores the stored rows differently, so trivium init data cannot write it."
        )


def generate_reasoning_gym(name: str, count: int, seed: int, config: dict[str, Any]) -> list[dict]:
    """``count`` rows with distinct questions, items ``seed, seed + 1, ...`` in order."""
    check_config(name, config)
    limit = count * _ATTEMPTS_PER_ROW
    dataset = create_dataset(name, config, seed=seed, size=limit)
    rows: list[dict] = []
    seen: set[str] = set()
    for index in range(limit):
        if len(rows) == count:
            break
        entry = dataset[index]
        if entry["question"] in seen:
            continue
        seen.add(entry["question"])
        row = entry_row(name, config, entry, item_seed=seed + index)
        check_stored_entry_scores_alike(dataset, entry, json.loads(row["response"])["entry"], name)
        rows.append(row)
    if len(rows) < count:
        raise UserError(
            f"reasoning-gym dataset '{name}' gave only {len(rows)} distinct questions of the {count} "
            f"asked for in {limit} draws; widen its config with --option or lower --num-train/--num-test."
        )
    return rows
