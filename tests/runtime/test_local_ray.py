"""The local Ray a run starts: its raylet reaches its own object store without a second's wait."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from trivium.runtime.local_ray import LOCAL_RAY_SYSTEM_CONFIG, connect

ray = pytest.importorskip("ray", reason="Ray is part of the dev extra; this test starts a local Ray")

pytestmark = pytest.mark.ray

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def logged_at(log: Path, phrase: str) -> datetime:
    for line in log.read_text(errors="replace").splitlines():
        if phrase in line and (stamp := STAMP.match(line)):
            return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
    raise AssertionError(f"{log.name} never logged {phrase!r}")


def test_a_local_ray_retries_its_connections_every_20_ms_and_its_store_is_reached_at_once():
    if ray.is_initialized():
        pytest.skip("a Ray session is running in this test process")
    connect(None, "local-ray-test", "INFO")
    try:
        config = ray._private.state.state.get_system_config()
        assert {key: config[key] for key in LOCAL_RAY_SYSTEM_CONFIG} == LOCAL_RAY_SYSTEM_CONFIG
        raylet_log = Path(ray._private.worker.global_worker.node.get_logs_dir_path()) / "raylet.out"
        store_up = logged_at(raylet_log, "Plasma store debug dump")
        connected = logged_at(raylet_log, "ObjectManager server started")
        # Ray's default retry came a second after the store's start on most local starts here.
        assert (connected - store_up).total_seconds() < 0.5
    finally:
        ray.shutdown()
