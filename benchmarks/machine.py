"""One description of the machine for every benchmark's results table."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def memory_gb() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 ** 2:.0f} GB"
    except OSError:
        pass
    return "unknown"


def describe(**versions: str) -> str:
    """A one-line description: CPU, cores, memory, load, OS, Python and the given package versions."""
    parts = [
        cpu_model(),
        f"{os.cpu_count()} logical CPUs (shared with other work; load average {load_average()} at the end)",
        f"{memory_gb()} RAM",
        f"{platform.system()} {platform.release()}",
        f"Python {platform.python_version()}",
    ]
    parts += [f"{name} {version}" for name, version in versions.items()]
    return "; ".join(parts)
