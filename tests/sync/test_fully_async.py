"""fully_async: the explorer loads the newest weights without waiting, within a bounded lead."""

import threading
import time

import pytest
import torch

from trivium.sync.synchronizer import Synchronizer, SyncTimeout


def _fully_async(**kwargs) -> Synchronizer:
    return Synchronizer(sync_style="fully_async", train_batch_size=4, sync_timeout=5, **kwargs)


def test_fully_async_trainer_publishes_every_sync_interval_of_its_steps():
    sync = _fully_async(sync_interval=2, sync_offset=1)
    assert [v for v in range(1, 7) if sync.trainer_should_publish(v)] == [2, 4, 6]


def test_fully_async_explorer_does_not_wait_within_the_lead_and_loads_the_newest():
    sync = _fully_async(sync_offset=1)
    assert sync.explorer_update(1) is None  # nothing published yet: explores with its weights
    sync.experiences_written(4)  # one training batch untrained: within sync_offset=1 batches
    sync.publish(3, {"w": torch.ones(1)})
    start = time.monotonic()
    update = sync.explorer_update(2)
    assert time.monotonic() - start < 0.1
    assert update.version == 3  # the newest, not the one a fixed schedule would ask for


def test_fully_async_explorer_waits_only_while_more_than_offset_batches_are_untrained():
    sync = _fully_async(sync_offset=1)
    sync.experiences_written(8)  # two batches ahead, the bound is one
    threading.Timer(0.2, lambda: (sync.publish(1, {"w": torch.ones(1)}), sync.experiences_trained(4))).start()
    start = time.monotonic()
    update = sync.explorer_update(3)
    waited = time.monotonic() - start
    assert 0.15 < waited < 2
    assert update is not None and update.version == 1


def test_fully_async_lead_counts_experiences_so_partial_steps_cannot_deadlock():
    # Steps that produce less than a batch (over-rollout) never make the explorer wait:
    # 3 experiences of a 4-experience batch cannot be trained yet and are within the bound.
    sync = _fully_async(sync_offset=0)
    sync.experiences_written(3)
    with pytest.raises(SyncTimeout, match="sync_offset"):
        sync.wait_within_lead(timeout=0.05)  # offset 0: on-policy, nothing may stay untrained
    sync = _fully_async(sync_offset=1)
    sync.experiences_written(3)
    sync.wait_within_lead(timeout=0.05)  # returns at once


def test_fully_async_explorer_stops_waiting_when_the_trainer_finishes():
    sync = _fully_async(sync_offset=1)
    sync.experiences_written(100)
    threading.Timer(0.1, sync.trainer_finished).start()
    start = time.monotonic()
    sync.wait_within_lead()
    assert time.monotonic() - start < 2


def test_fully_async_wait_past_sync_timeout_is_a_clear_error():
    sync = Synchronizer(sync_style="fully_async", train_batch_size=2, sync_offset=1, sync_timeout=0.2)
    sync.experiences_written(5)
    with pytest.raises(SyncTimeout, match="5 untrained, at most 2"):
        sync.explorer_update(4)
