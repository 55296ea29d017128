"""One compact console line per step: the headline metrics first, then a few others.

The full set of values is in ``metrics.jsonl``; the console only has to tell a person at a
glance whether the run is healthy.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase
from typing import Any

from trivium.core.metric_names import HEADLINE_KEYS
from trivium.monitor.base import Monitor

ROLE_STYLES = {"explorer": "cyan", "trainer": "magenta"}


class ConsoleMonitor(Monitor):
    def __init__(self, role: str, *, console: Any = None, max_values: int = 8):
        from rich.console import Console

        self.role = role
        self.console = console if console is not None else Console(highlight=False)
        self.max_values = max_values

    def log(self, metrics: dict[str, float], step: int) -> None:
        from rich.text import Text

        line = Text()
        line.append(f"[{self.role}]", style=ROLE_STYLES.get(self.role, "bold"))
        line.append(f" step {step}")
        shown = select_console_keys(metrics, self.max_values)
        for key in shown:
            line.append(" | ")
            line.append(key, style="dim")
            line.append(f" {format_value(metrics[key])}")
        hidden = len(metrics) - len(shown)
        if hidden:
            line.append(f" (+{hidden} more)", style="dim")
        self.console.print(line, soft_wrap=True)


def select_console_keys(metrics: dict[str, float], max_values: int) -> list[str]:
    """Headline keys in their fixed order, then the remaining keys alphabetically, up to ``max_values``."""
    chosen: list[str] = []
    for pattern in HEADLINE_KEYS:
        for key in sorted(metrics):
            if key not in chosen and fnmatchcase(key, pattern):
                chosen.append(key)
    chosen.extend(key for key in sorted(metrics) if key not in chosen)
    return chosen[:max_values]


def format_value(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}"
