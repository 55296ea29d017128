"""The loop of each mode, by name: ``launch`` runs the loop registered under the config's mode.

A loop is called as ``loop(session, progress)`` and drives the session's workers until the
run ends. ``colocate``, ``both``, ``train`` and ``explore`` register in
``trivium.runtime.loops``; ``serve`` registers in ``trivium.serve.loop``, which is built on
the runtime and so registers into it instead of being imported by it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trivium.registry import Registry

ModeLoop = Callable[[Any, Any], None]

MODE_LOOPS: Registry[ModeLoop] = Registry(
    "mode loop", builtin_modules=("trivium.runtime.loops", "trivium.serve.loop")
)
