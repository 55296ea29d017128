"""What a Data-Juicer operator needs, read without running it, and why one cannot run here.

Finds an operator by its Data-Juicer name (``data_juicer.ops.OPERATORS``) and reads what it
would do from its class and modules: the arguments it takes, the models it asks Data-Juicer
to prepare (recorded, never loaded), the services its modules reach, the packages they
import lazily. ``operator_problem`` turns that into the reason an operator cannot run in the
explorer's process: a network service other than a model's API (``data_juicer_api_models.py``),
a model Data-Juicer would download, a package not installed, bad args, or a text rewrite of
an experience. Data-Juicer is imported on first use only.
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


# Packages an operator imports lazily that it uses only when this argument is true.
_USED_ONLY_WITH = {"vllm": "enable_vllm"}


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


def lazy_packages(cls: type) -> Iterator[Any]:
    """The lazily imported packages of the operator's modules (Data-Juicer's ``LazyLoader``)."""
    from data_juicer.utils.lazy_loader import LazyLoader

    for module in _operator_modules(cls):
        for value in list(vars(module).values()):
            if isinstance(value, LazyLoader):
                yield value


def _missing_packages(cls: type) -> list[str]:
    missing = []
    for loader in lazy_packages(cls):
        top = loader._module_name.split(".")[0]
        if importlib.util.find_spec(top) is None:
            missing.append(loader._package_name or top)
    return sorted(set(missing))


@contextlib.contextmanager
def models_recorded(cls: type) -> Iterator[list[tuple[str, dict[str, Any]]]]:
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
        return None  # an OpenAI-compatible service the user names; checked when the run starts
    if any(isinstance(v, str) and os.path.exists(v) for v in kwargs.values()):
        return None  # a model on this machine
    return (
        f"it loads the {model_type} model '{model}', which Data-Juicer downloads at run time; "
        "give a local model path where the operator takes one"
    )


def with_defaults(args: dict[str, Any]) -> dict[str, Any]:
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
    with models_recorded(cls) as requested:
        try:
            cls(**with_defaults(args))
        except Exception as error:  # noqa: BLE001 - any construction failure is a config problem
            return f"bad args {args}: {error}"
    for model_type, kwargs in requested:
        problem = _model_problem(model_type, kwargs)
        if problem:
            return problem
    missing = [p for p in _missing_packages(cls) if p not in _USED_ONLY_WITH or args.get(_USED_ONLY_WITH[p])]
    if missing:
        return (
            f"it needs the package(s) {', '.join(missing)}, not installed (Data-Juicer would install them "
            f"while the run is going; trivium does not): `pip install {' '.join(missing)}` first"
        )
    return None


def refusal_message(name: str, problem: str) -> str:
    return (
        f"the Data-Juicer operator '{name}' cannot run here: {problem}. trivium runs Data-Juicer operators "
        "in the explorer's process; of the network, they may reach only a model's OpenAI-compatible API"
    )
