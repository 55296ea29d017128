"""How many CPU cores this process may use: the one source of trivium's CPU thread counts.

``os.cpu_count()`` counts the machine's cores, and a container, a job scheduler or
``taskset`` rarely gives a process all of them. The usable count is the smaller of

* the cores the process may run on (its affinity mask: ``taskset``, cpusets), and
* its cgroup's CPU quota (``docker --cpus``, Kubernetes CPU limits, systemd ``CPUQuota``),
  rounded down, at least 1: a thread beyond the quota only waits to be throttled.

The quota is read from cgroup v2's ``cpu.max`` (``"<quota> <period>"`` or ``"max <period>"``)
and from cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota ``-1``: no limit),
in the process's own cgroup and every cgroup above it; the tightest limit wins. This module
imports nothing heavy, so the command line can use it before torch is imported.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
# Where cgroup v1 mounts the cpu controller (the first name is usually a link to the second).
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def usable_cores(*, cgroup_root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> int:
    """The cores this process may use (at least 1)."""
    cores = affinity_cores()
    quota = cgroup_cpu_quota(cgroup_root=cgroup_root, proc_self_cgroup=proc_self_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


def affinity_cores() -> int:
    """The cores the process may be scheduled on (all of the machine's where there is no mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks on this platform
        return os.cpu_count() or 1


def cgroup_cpu_quota(
    *, cgroup_root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> float | None:
    """The CPU time the process's cgroups allow, in cores (1.5: one and a half); None: no limit."""
    limits = []
    for controllers, path in _cgroup_paths(proc_self_cgroup):
        if controllers == "":  # cgroup v2: one hierarchy, controllers not named
            limits += [_v2_quota(directory / "cpu.max") for directory in _up_to(cgroup_root, path)]
        elif "cpu" in controllers.split(","):
            mount = next(
                (cgroup_root / name for name in V1_CPU_MOUNTS if (cgroup_root / name).is_dir()), None
            )
            if mount is not None:
                limits += [_v1_quota(directory) for directory in _up_to(mount, path)]
    limits = [limit for limit in limits if limit is not None]
    return min(limits) if limits else None


def _cgroup_paths(proc_self_cgroup: Path) -> list[tuple[str, str]]:
    """(controllers, path) of each line ``id:controllers:path``; the root alone when unreadable."""
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return [("", "/"), ("cpu", "/")]
    entries = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            entries.append((parts[1], parts[2]))
    return entries


def _up_to(mount: Path, path: str) -> list[Path]:
    """``mount/path`` and every directory above it up to ``mount``. Inside a container the
    mount is often the process's own cgroup while ``path`` names it as the host sees it;
    directories that do not exist are skipped, so the mount itself is still read."""
    parts = [part for part in path.split("/") if part and part != ".."]
    directories = [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [directory for directory in directories if directory.is_dir()]


def _v2_quota(cpu_max: Path) -> float | None:
    fields = _read_fields(cpu_max)
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(directory: Path) -> float | None:
    quota, period = (
        _read_fields(directory / "cpu.cfs_quota_us"),
        _read_fields(directory / "cpu.cfs_period_us"),
    )
    if len(quota) != 1 or len(period) != 1:
        return None
    return _ratio(quota[0], period[0])


def _ratio(quota: str, period: str) -> float | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:  # -1: no limit
        return None
    return quota_us / period_us


def _read_fields(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []
