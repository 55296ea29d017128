"""Synchronizer rules: which version the explorer needs, timeouts, transports, self-check."""

import threading
import time

import pytest
import torch

from trivium.sync.self_check import max_logprob_gap
from trivium.sync.synchronizer import Synchronizer, SyncTimeout, VersionUnreachable


def test_fixed_style_on_policy_needs_the_previous_steps_version():
    sync = Synchronizer(sync_interval=1, sync_offset=0)
    assert not sync.explorer_should_sync(1)
    assert [sync.required_version(step) for step in (2, 3, 4)] == [1, 2, 3]
    assert all(sync.trainer_should_publish(v) for v in (1, 2, 3))


def test_fixed_style_with_offset_lets_the_explorer_run_ahead():
    sync = Synchronizer(sync_interval=1, sync_offset=1)
    assert [sync.required_version(step) for step in (2, 3, 4)] == [0, 1, 2]


def test_fixed_style_with_interval_syncs_every_interval():
    sync = Synchronizer(sync_interval=4, sync_offset=0)
    assert [s for s in range(1, 14) if sync.explorer_should_sync(s)] == [5, 9, 13]
    assert sync.required_version(5) == 4 and sync.required_version(9) == 8
    assert [v for v in range(1, 9) if sync.trainer_should_publish(v)] == [4, 8]


def test_two_trainer_steps_per_explore_step_double_the_version():
    sync = Synchronizer(sync_interval=1, train_steps_per_explore_step=2.0)
    assert sync.required_version(3) == 4


def test_wait_times_out_with_a_clear_error_not_a_hang():
    sync = Synchronizer(sync_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(SyncTimeout, match="sync_timeout"):
        sync.wait_for(1)
    assert time.monotonic() - start < 2


def test_wait_returns_when_the_trainer_publishes():
    sync = Synchronizer(sync_timeout=10)
    weights = {"w": torch.ones(2)}
    threading.Timer(0.1, lambda: sync.publish(1, weights)).start()
    update = sync.wait_for(1)
    assert update.version == 1 and torch.equal(update.load()["w"], torch.ones(2))
    weights["w"].add_(1)  # the trainer keeps training; the snapshot does not move
    assert torch.equal(update.load()["w"], torch.ones(2))
    sync.confirm(1)
    assert sync.wait_for(1) is None  # already served


def test_checkpoint_transport_roundtrips_tied_weights(tmp_path):
    sync = Synchronizer(sync_method="checkpoint", run_dir=tmp_path)
    shared = torch.randn(3, 2)
    sync.publish(2, {"embed": shared, "lm_head": shared})
    update = sync.poll()
    loaded = update.load()
    assert update.version == 2 and torch.equal(loaded["embed"], shared) and torch.equal(loaded["lm_head"], shared)
    sync.publish(3, {"embed": shared, "lm_head": shared})
    assert not (tmp_path / "sync" / "weights_v2.safetensors").exists()  # older versions are removed


def test_explorer_driven_request_is_answered_by_the_trainer():
    sync = Synchronizer(sync_style="explorer_driven", sync_timeout=5)
    assert not sync.trainer_should_publish(3)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("update", sync.request_sync()))
    thread.start()
    for _ in range(100):
        if sync.trainer_should_publish(3):
            break
        time.sleep(0.01)
    sync.publish(3, {"w": torch.zeros(1)})
    thread.join(5)
    assert result["update"].version == 3


def test_trainer_driven_poll_never_blocks():
    sync = Synchronizer(sync_style="trainer_driven", sync_interval=2)
    assert sync.poll() is None
    assert [v for v in range(1, 7) if sync.trainer_should_publish(v)] == [2, 4, 6]


def test_finished_trainer_releases_a_waiting_explorer():
    sync = Synchronizer(sync_timeout=5)
    sync.publish(2, {"w": torch.zeros(1)})
    sync.trainer_finished()
    assert sync.wait_for(10).version == 2


def test_logprob_gap_is_the_largest_absolute_difference():
    assert max_logprob_gap([torch.tensor([-1.0, -2.0])], [torch.tensor([-1.0, -2.5])]) == pytest.approx(0.5)


def test_bucket_directory_update_loads_every_bucket_and_is_removed_when_superseded(tmp_path):
    """A sharded trainer's checkpoint update is a directory of bucket files: loading merges them;
    publishing a newer version deletes the older directory."""
    from safetensors.torch import save_file

    from trivium.sync.synchronizer import WeightUpdate, sync_weights_dir

    sync = Synchronizer(sync_method="checkpoint", run_dir=tmp_path)
    first = sync_weights_dir(tmp_path, 1)
    first.mkdir(parents=True)
    save_file({"a": torch.ones(2)}, str(first / "bucket_00000.safetensors"))
    save_file({"b": torch.full((3,), 2.0)}, str(first / "bucket_00001.safetensors"))
    sync.publish_update(WeightUpdate(version=1, path=str(first)))
    loaded = sync.poll().load()
    assert loaded.keys() == {"a", "b"}
    assert torch.equal(loaded["b"], torch.full((3,), 2.0))
    sync.publish(2, {"a": torch.zeros(2)})
    assert not first.exists() and sync.poll().version == 2


def test_a_stop_request_ends_every_explorer_wait_at_once():
    stop = threading.Event()
    sync = Synchronizer(sync_timeout=600, should_stop=stop.is_set)
    threading.Timer(0.2, stop.set).start()
    start = time.monotonic()
    assert sync.wait_for(1) is None
    assert time.monotonic() - start < 2
    asynchronous = Synchronizer(sync_style="fully_async", train_batch_size=2, sync_timeout=600, should_stop=lambda: True)
    asynchronous.experiences_written(100)
    start = time.monotonic()
    asynchronous.wait_within_lead()
    assert time.monotonic() - start < 1


def test_a_version_the_trainer_cannot_reach_ends_the_wait_with_the_numbers():
    # One step of 4 tasks x 4 repeats with a task failed: 12 experiences, a batch is 16.
    sync = Synchronizer(sync_timeout=600, train_batch_size=16, counts_experiences=True)
    sync.experiences_written(12)
    start = time.monotonic()
    with pytest.raises(VersionUnreachable, match="version 1, but the trainer is at version 0 with 12 untrained "
                                                 "experiences, fewer than the 16 its next 1 step"):
        sync.wait_for(1)
    assert time.monotonic() - start < 1
    sync.experiences_written(4)  # a whole batch: the trainer can get there, so the explorer waits
    threading.Timer(0.1, lambda: (sync.experiences_trained(16, trainer_version=1), sync.publish(1, {}))).start()
    assert sync.wait_for(1).version == 1
    driven = Synchronizer(sync_style="explorer_driven", train_batch_size=16, counts_experiences=True)
    driven.experiences_written(5)
    with pytest.raises(VersionUnreachable):
        driven.request_sync()


def test_short_timeouts_keep_their_digits_in_the_message():
    sync = Synchronizer(sync_timeout=0.001)
    with pytest.raises(SyncTimeout, match=r"waited 0\.001s \(synchronizer.sync_timeout\)"):
        sync.wait_for(1)
