"""monitor.enable_ray_timeline."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest
from rich.console import Console

from trivium.monitor import create_monitor
from trivium.monitor.timeline import export_ray_timeline, timeline_path


def test_without_ray_running_there_is_a_clear_note_and_no_file(tmp_path, caplog):
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        pytest.skip("a Ray session is running in this test process")
    with caplog.at_level(logging.WARNING, logger="trivium.monitor.timeline"):
        group = create_monitor(
            run_dir=tmp_path,
            project="p",
            name="r",
            role="explorer",
            enable_ray_timeline=True,
            console=Console(file=io.StringIO()),
        )
        group.close()
    assert not timeline_path(tmp_path).exists()
    assert "Ray is not running" in caplog.text


@pytest.mark.slow
@pytest.mark.ray
def test_timeline_json_is_exported_when_ray_runs(tmp_path):
    ray = pytest.importorskip("ray")
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:

        @ray.remote
        def square(value):
            return value * value

        assert ray.get([square.remote(value) for value in range(3)]) == [0, 1, 4]
        path = export_ray_timeline(tmp_path)
    finally:
        if started_here:
            ray.shutdown()
    assert path == tmp_path / "monitor" / "timeline.json"
    events = json.loads(path.read_text())
    assert isinstance(events, list) and any("square" in str(event.get("name", "")) for event in events)
