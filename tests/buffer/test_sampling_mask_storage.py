"""An experience's sampling mask (its kept sets) survives every storage kind and the queue's checkpoint."""

from __future__ import annotations

import pytest
import torch

from trivium.buffer import create_reader, create_writer
from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience
from trivium.core.sampling_mask import CAPPED, SamplingMask

from .conftest import experience, storage

# Five response tokens: a top-k set, an environment token, a top-p set, a capped one, a greedy one.
MASK = SamplingMask.from_sets([[4, 9, 31], 0, [2, 5, 6, 8], CAPPED, [7]], temperature=0.6)


def masked(index: int) -> Experience:
    return experience(index, sampling_mask=MASK)


def assert_same_mask(loaded: Experience) -> None:
    assert loaded.sampling_mask is not None
    assert loaded.sampling_mask.counts.tolist() == MASK.counts.tolist()
    assert loaded.sampling_mask.token_ids.tolist() == MASK.token_ids.tolist()
    assert loaded.sampling_mask.temperature == pytest.approx(0.6)


@pytest.mark.parametrize("storage_type", ["queue", "sql", "file"])
def test_kept_sets_survive_a_round_trip_through_each_storage(tmp_path, storage_type):
    path = {"queue": None, "sql": str(tmp_path / "buffer.db"), "file": str(tmp_path / "exp.jsonl")}[
        storage_type
    ]
    config = storage("masks", storage_type=storage_type, **({"path": path} if path else {}))
    writer = create_writer(config)
    writer.write([masked(1), experience(2)])
    writer.finish()
    loaded = create_reader(config).read(2, timeout=1)
    assert_same_mask(loaded[0])
    assert loaded[1].sampling_mask is None
    # Only the storage's own fields travel in the SQL info column: the caller's info is unchanged.
    assert loaded[0].info == {"index": 1}


def test_kept_sets_survive_the_queues_checkpoint_state():
    config = storage("masks_state")
    create_writer(config).write([masked(3)])
    state = create_reader(config).state_dict()
    restored = Experience.from_dict(state["unread"][0]["experience"])
    assert_same_mask(restored)


def test_a_batch_pads_the_sets_and_keeps_them_through_selection():
    batch = ExperienceBatch.from_experiences([masked(1), experience(2, tokens=6)])
    assert batch.kept_token_ids.shape == (2, 5, 4)
    assert batch.kept_token_ids[0, 2].tolist() == [2, 5, 6, 8]
    assert batch.kept_token_ids[0, 1].tolist() == [-1] * 4 and batch.kept_token_ids[1].eq(-1).all()
    torch.testing.assert_close(batch.sampling_temperatures, torch.tensor([0.6, 1.0]))
    second = batch.select([1])  # a shorter row: the response columns are trimmed with the sets
    assert second.kept_token_ids.shape == (1, 3, 4) and second.sampling_temperatures.tolist() == [1.0]
