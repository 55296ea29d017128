"""A writer killed with SIGKILL loses nothing whose write() had returned."""

import os
import signal
import subprocess
import sys
import time

import pytest

from trivium.buffer.queue_storage import ExperienceQueue
from trivium.buffer.queue_mirror import open_mirror
from trivium.buffer.sql_store import SqlExperienceStore

WRITER = """
import sys
from trivium.buffer import create_writer
from trivium.config.schema import StorageConfig
from trivium.core.experience import Experience

storage_type, path = sys.argv[1], sys.argv[2]
writer = create_writer(StorageConfig(name="durable", storage_type=storage_type, path=path))
count = 0
while True:
    batch = [Experience(tokens=list(range(64)), prompt_length=8, eid=f"x{count + i}") for i in range(5)]
    writer.write(batch)
    count += len(batch)
    print(count, flush=True)
"""


def run_and_kill(storage_type: str, path: str, at_least: int = 40) -> int:
    """Start a writer, SIGKILL it once it reported ``at_least`` written, return its last report."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, storage_type, path], stdout=subprocess.PIPE, text=True, env=env
    )
    committed = 0
    deadline = time.monotonic() + 60
    try:
        while committed < at_least and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            committed = int(line)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert committed >= at_least, "the writer did not get far enough before the deadline"
    return committed


@pytest.mark.slow
def test_sql_storage_survives_sigkill(tmp_path):
    path = str(tmp_path / "durable.db")
    committed = run_and_kill("sql", path)
    stored = {e.eid for e in SqlExperienceStore(path, "durable").unconsumed()}
    assert {f"x{i}" for i in range(committed)} <= stored


@pytest.mark.slow
@pytest.mark.parametrize("mirror_name", ["mirror.db", "mirror.jsonl"])
def test_queue_mirror_survives_sigkill_and_requeues_unread(tmp_path, mirror_name):
    path = str(tmp_path / mirror_name)
    committed = run_and_kill("queue", path)
    restored = ExperienceQueue("durable", mirror=open_mirror(path, "durable"))
    eids = [e.eid for e in restored.get(10**6, timeout=0)]
    assert {f"x{i}" for i in range(committed)} <= set(eids)
    assert eids[:committed] == [f"x{i}" for i in range(committed)]  # write order kept
    # What a reader took is not restored again.
    again = ExperienceQueue("durable", mirror=open_mirror(path, "durable"))
    assert len(again) == 0
