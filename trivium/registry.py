"""One small generic registry, plugin loading, and the outside package a component needs.

A name resolves in this order: a registered name, then a dotted path to a Python object
(``package.module.Name`` or ``package.module:Name``). Plugins are ``.py`` files in a
directory given by ``--plugin-dir``; importing them runs their ``@REGISTRY.register``
decorators.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RegistryError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str, builtin_modules: tuple[str, ...] = ()):
        self.kind = kind
        self._items: dict[str, T] = {}
        # Modules whose import registers the built-ins; imported on first lookup.
        self._builtin_modules = builtin_modules
        self._builtins_loaded = False
        # Runner threads look names up concurrently; the first must finish importing first.
        self._lock = threading.RLock()

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        def add(item: T) -> T:
            self._items[name] = item
            return item

        return add(obj) if obj is not None else add

    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        with self._lock:
            if not self._builtins_loaded:
                for module in self._builtin_modules:
                    importlib.import_module(module)
                self._builtins_loaded = True

    def names(self) -> list[str]:
        self._load_builtins()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self._load_builtins()
        return name in self._items

    def get(self, name: str) -> T:
        self._load_builtins()
        if name in self._items:
            return self._items[name]
        if "." in name or ":" in name:
            return import_object(name)
        hint = difflib.get_close_matches(name, self._items, n=1)
        suggestion = f" Did you mean '{hint[0]}'?" if hint else ""
        raise RegistryError(
            f"Unknown {self.kind} '{name}'.{suggestion} "
            f"Known: {', '.join(sorted(self._items)) or '(none)'}; "
            "or give a dotted path like 'my_package.module:Name'."
        )


def import_object(path: str) -> Any:
    """Import ``pkg.mod:Name`` or ``pkg.mod.Name``; ``file:Name`` also finds a ``--plugin-dir`` file's ``Name``."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    try:
        plugin = sys.modules.get(f"{PLUGIN_MODULE_PREFIX}{module_name}")
        module = plugin if plugin is not None else importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as error:
        raise RegistryError(f"Cannot import '{path}': {error}") from error


def missing_package_message(component: Any) -> str | None:
    """Why a registered component cannot start here, or None when it can.

    A component that needs an outside package declares it: ``required_package`` (the module
    to import), ``environment`` (what the package provides) and ``install_hint``. The
    configuration rules ask before a run starts; the component asks again when built.
    """
    package = getattr(component, "required_package", "")
    if not package or importlib.util.find_spec(package) is not None:
        return None
    what = getattr(component, "__name__", str(component))
    return f"{what} uses {component.environment}, which needs the Python package '{package}': {component.install_hint}"


# A plugin file ``name.py`` is imported as the module ``trivium_plugin_name``.
PLUGIN_MODULE_PREFIX = "trivium_plugin_"

# Plugin directories imported by this process, in order: processes a run starts (Ray actors)
# import the same ones.
_plugin_dirs: list[str] = []


def loaded_plugin_dirs() -> tuple[str, ...]:
    return tuple(_plugin_dirs)


def load_plugin_dir(directory: str | Path) -> list[str]:
    """Import every ``*.py`` in ``directory``; returns the module names loaded."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"plugin directory not found: {directory}")
    if str(directory.resolve()) not in _plugin_dirs:
        _plugin_dirs.append(str(directory.resolve()))
    loaded = []
    for file in sorted(directory.glob("*.py")):
        module_name = f"{PLUGIN_MODULE_PREFIX}{file.stem}"
        if module_name in sys.modules:
            loaded.append(module_name)
            continue
        spec = importlib.util.spec_from_file_location(module_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        loaded.append(module_name)
    return loaded
