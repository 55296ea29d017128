"""Data-Juicer operators in the task and experience pipelines, run in the explorer's process.

Owns what trivium does with the ``py-data-juicer`` package: finding an operator by its
Data-Juicer name (``data_juicer.ops.OPERATORS``), the reason an operator cannot run here
(it reaches a network service, calls or downloads a model, needs a package that is not
installed, or would rewrite an experience's text), building operators with those checks,
and running them over task rows (``DataJuicerTaskOperator``) and experiences
(``DataJuicerExperienceOperator``; a recipe file's operators: ``data_juicer_recipes.py``).

An operator reads one text field (its ``text_key``); it runs once per field the pipeline
names, with one worker unless its args or recipe ask for more. Data-Juicer is imported on
first use only; nothing here starts a server.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

from trivium.buffer.operators import ExperienceOperator
from trivium.core.experience import Experience
from trivium.errors import UserError

# What a Data-Juicer operator sees of an experience: these fields, one sample per experience.
EXPERIENCE_FIELDS = ("text", "prompt_text", "response_text", "prompt", "response")
# Where a sample remembers which row or experience it came from.
_POSITION = "__trivium_position__"
# Source text of an operator's modules that means it talks to a service over the network.
_NETWORK_MARKERS = {
    "label_studio_sdk": "a Label Studio annotation server",
    "requests.": "HTTP servers",
    "urllib.request": "HTTP servers",
    "aiohttp": "HTTP servers",
    "httpx": "HTTP servers",
    "boto3": "S3 storage",
    "snapshot_download": "model hubs",
}


def data_juicer_installed() -> bool:
    return importlib.util.find_spec("data_juicer") is not None


def data_juicer_operators() -> dict[str, type]:
    """Data-Juicer's registry of operators, by name; empty when the package is not installed."""
    if not data_juicer_installed():
        return {}
    from data_juicer.ops import OPERATORS

    return dict(OPERATORS.modules)


def is_data_juicer_operator(name: str) -> bool:
    return bool(name) and "." not in name and ":" not in name and name in data_juicer_operators()


def _operator_modules(cls: type) -> list[Any]:
    """The Data-Juicer modules that define ``cls`` and its bases, except the shared base module."""
    names = [c.__module__ for c in cls.__mro__ if c.__module__.startswith("data_juicer.ops")]
    return [
        sys.modules[n] for n in dict.fromkeys(names) if n != "data_juicer.ops.base_op" and n in sys.modules
    ]


def _network_use(cls: type) -> str | None:
    for module in _operator_modules(cls):
        with contextlib.suppress(OSError, TypeError):
            source = inspect.getsource(module)
            for marker, what in _NETWORK_MARKERS.items():
                if marker in source:
                    return what
    return None


def _lazy_packages(cls: type) -> Iterator[Any]:
    """The lazily imported packages of the operator's modules (Data-Juicer's ``LazyLoader``)."""
    from data_juicer.utils.lazy_loader import LazyLoader

    for module in _operator_modules(cls):
        for value in list(vars(module).values()):
            if isinstance(value, LazyLoader):
                yield value


def _missing_packages(cls: type) -> list[str]:
    missing = []
    for loader in _lazy_packages(cls):
        top = loader._module_name.split(".")[0]
        if importlib.util.find_spec(top) is None:
            missing.append(loader._package_name or top)
    return sorted(set(missing))


@contextlib.contextmanager
def _models_recorded(cls: type) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """While open, the operator's modules record the models they ask for instead of preparing them."""
    requested: list[tuple[str, dict[str, Any]]] = []

    def record(model_type: str, **model_kwargs: Any) -> tuple[str, str]:
        requested.append((model_type, model_kwargs))
        return ("recorded model", model_type)

    patched = [m for m in _operator_modules(cls) if "prepare_model" in vars(m)]
    originals = [m.prepare_model for m in patched]
    for module in patched:
        module.prepare_model = record
    try:
        yield requested
    finally:
        for module, original in zip(patched, originals):
            module.prepare_model = original


def _model_problem(model_type: str, kwargs: dict[str, Any]) -> str | None:
    named = [
        str(v)
        for k, v in kwargs.items()
        if k in ("model", "pretrained_model_name_or_path", "model_path", "model_name", "lang")
        and v is not None
    ]
    model = named[0] if named else model_type
    if model_type == "api":
        return f"it calls the model '{model}' through a network API at run time"
    if any(isinstance(v, str) and os.path.exists(v) for v in kwargs.values()):
        return None  # a model on this machine
    return (
        f"it loads the {model_type} model '{model}', which Data-Juicer downloads at run time; "
        "give a local model path where the operator takes one"
    )


def _with_defaults(args: dict[str, Any]) -> dict[str, Any]:
    # One process: the explorer runs the operator inline, never a pool of workers.
    return {"num_proc": 1, **args}


def accepted_args(cls: type) -> set[str]:
    """The arguments the operator reads: its and its bases' parameters, and the keywords they look up."""
    names: set[str] = set()
    for base in cls.__mro__:
        init = vars(base).get("__init__")
        if init is None or not base.__module__.startswith("data_juicer"):
            continue
        names.update(
            p.name
            for p in inspect.signature(init).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"
        )
        with contextlib.suppress(OSError, TypeError):
            names.update(re.findall(r"kwargs(?:\.get\(|\.pop\(|\[)[\"'](\w+)[\"']", inspect.getsource(init)))
    return names


def operator_problem(name: str, args: dict[str, Any], *, on_experiences: bool) -> str | None:
    """Why the Data-Juicer operator ``name`` with ``args`` cannot run here, or None.

    Builds the operator with model preparation recorded instead of done, so nothing is
    downloaded and no service is contacted.
    """
    from data_juicer.ops import TAGGING_OPS, Mapper

    cls = data_juicer_operators()[name]
    network = _network_use(cls)
    if network:
        return f"it reaches {network} over the network at run time"
    if on_experiences and issubclass(cls, Mapper) and name not in TAGGING_OPS.modules:
        return (
            "it rewrites text, and an experience is trained on its token ids, which a text rewrite leaves "
            "unchanged; use it in data_processor.task_pipeline, or a filter or deduplicator here"
        )
    accepted = accepted_args(cls)
    unknown = sorted(set(args) - accepted)
    if unknown:
        close = [c for u in unknown for c in difflib.get_close_matches(u, accepted, n=1)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        own = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "args", "kwargs")]
        return (
            f"it takes no args {unknown}{hint}; its own args are {own}, besides text_key and the common ones"
        )
    with _models_recorded(cls) as requested:
        try:
            cls(**_with_defaults(args))
        except Exception as error:  # noqa: BLE001 - any construction failure is a config problem
            return f"bad args {args}: {error}"
    for model_type, kwargs in requested:
        problem = _model_problem(model_type, kwargs)
        if problem:
            return problem
    missing = _missing_packages(cls)
    if missing:
        return (
            f"it needs the package(s) {', '.join(missing)}, not installed (Data-Juicer would install them "
            f"while the run is going; trivium does not): `pip install {' '.join(missing)}` first"
        )
    return None


def refusal_message(name: str, problem: str) -> str:
    return (
        f"the Data-Juicer operator '{name}' cannot run here: {problem}. trivium runs Data-Juicer operators "
        "in the explorer's process, without network access to models or services"
    )


def build_operator(name: str, args: dict[str, Any], *, on_experiences: bool) -> Any:
    """The Data-Juicer operator ``name`` built from ``args``; UserError with the reason when refused."""
    problem = operator_problem(name, args, on_experiences=on_experiences)
    if problem:
        raise UserError(refusal_message(name, problem))
    cls = data_juicer_operators()[name]
    for loader in _lazy_packages(cls):
        loader._auto_install = False  # every package it needs is installed (checked above)
    return cls(**_with_defaults(args))


def entry_problem(
    name: str, args: dict[str, Any], target_fields: list[str], *, on_experiences: bool
) -> str | None:
    """Why a pipeline entry naming the Data-Juicer operator ``name`` cannot run here, or None."""
    pipeline = "experience_pipeline" if on_experiences else "task_pipeline"
    fields = [args["text_key"]] if "text_key" in args else list(target_fields)
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


def operators_per_field(
    name: str, args: dict[str, Any], fields: list[str], *, on_experiences: bool
) -> list[Any]:
    """One operator per field it reads: ``args.text_key`` if given, else each of ``fields``."""
    fields = [args["text_key"]] if "text_key" in args else list(fields)
    if not fields:
        raise UserError(
            f"the Data-Juicer operator '{name}' needs the field it reads: set the pipeline's "
            "target_fields, or args.text_key"
        )
    return [
        build_operator(name, {**args, "text_key": field}, on_experiences=on_experiences) for field in fields
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
        os.environ = environment


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
        self.fields = [operator.text_key for operator in self.operators]

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
        self.operators = operators_per_field(name, args, list(fields) or ["text"], on_experiences=True)
        check_experience_fields(name, [operator.text_key for operator in self.operators])

    def process(self, experiences):
        samples = [experience_sample(e, i) for i, e in enumerate(experiences)]
        kept = kept_experiences(experiences, run_operators(self.operators, samples))
        return kept, {"dropped": float(len(experiences) - len(kept))}
