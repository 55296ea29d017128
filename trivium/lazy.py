"""Heavy packages imported on first use, so that importing a module of trivium stays cheap.

A module whose functions need torch only when they run binds it with
``torch = lazy_module("torch", globals())`` instead of ``import torch``: the name behaves as
the package, which is imported the first time one of its attributes is read
(``torch.where``), and from then on the name is the package itself. Until then nothing is
imported and nothing is added to ``sys.modules``, so ``trivium plan`` reads the algorithm
registries (names, signatures, traits) without loading torch.
``no_grad`` is ``torch.no_grad()`` as a decorator that does the same.

Type hints keep a plain ``import torch`` under ``if TYPE_CHECKING:``; anything evaluated
when the module is imported (a decorator, a default value, a type alias) must not touch
a lazy module, or it imports the package right then.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class LazyModule(types.ModuleType):
    """Stands for the module ``name`` in ``namespace`` until the first attribute read.

    That read imports the module and rebinds every name of ``namespace`` holding this
    stand-in to the module itself, so later reads cost what a plain ``import`` costs.
    """

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        super().__init__(name)
        self.__dict__["_namespace"] = namespace

    def __getattr__(self, attribute: str) -> Any:
        # Called only for names this stand-in lacks: every name of the module it stands for.
        module = importlib.import_module(self.__name__)  # waits while another thread imports it
        namespace = self.__dict__["_namespace"]
        for key, value in list(namespace.items()):
            if value is self:
                namespace[key] = module
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<module '{self.__name__}', imported on first use>"


def lazy_module(name: str, namespace: dict[str, Any]) -> Any:
    """``name`` (``"torch"``, ``"torch.nn.functional"``) for the module whose ``globals()`` is ``namespace``."""
    return LazyModule(name, namespace)


def no_grad(fn: F) -> F:
    """Run ``fn`` under ``torch.no_grad()``; unlike ``@torch.no_grad()``, defining it imports nothing."""

    @functools.wraps(fn)
    def without_gradients(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)

    return without_gradients  # type: ignore[return-value]
