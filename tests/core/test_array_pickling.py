"""Experiences and sampling masks pickle their tensors as numpy arrays and come back equal,
writable, and as tensors; what numpy cannot hold stays a tensor."""

import pickle

import torch

from trivium.core.array_pickling import arrays_to_tensors, tensors_to_arrays
from trivium.core.experience import Experience
from trivium.core.sampling_mask import SamplingMask


def experience(**overrides) -> Experience:
    values = dict(
        tokens=torch.tensor([5, 6, 7, 8, 9]), prompt_length=2, logprobs=torch.tensor([-0.5, -1.0, -2.0]),
        action_mask=torch.tensor([True, False, True]), reward=1.0, advantages=torch.tensor([0.5, 0.5, 0.5]),
        info={"turns": 1}, metrics={"accuracy": 1.0}, task_id="t", group_id="g",
    )
    return Experience(**(values | overrides))


def out_of_band_round_trip(value):
    """Pickle protocol 5 with out-of-band buffers, as Ray sends objects: arrays come back read-only."""
    buffers = []
    payload = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    assert buffers, "the arrays were not sent out of band"
    return pickle.loads(payload, buffers=[memoryview(b.raw()).toreadonly() for b in buffers])


def test_an_experience_comes_back_with_equal_tensors_and_every_other_field():
    original = experience(sampling_mask=SamplingMask(torch.tensor([2, 0, -1]), torch.tensor([3, 9])))
    for back in (pickle.loads(pickle.dumps(original)), out_of_band_round_trip(original)):
        for name in ("tokens", "logprobs", "action_mask", "advantages"):
            value = getattr(back, name)
            assert isinstance(value, torch.Tensor) and value.dtype == getattr(original, name).dtype
            assert torch.equal(value, getattr(original, name))
        assert back.returns is None and back.teacher_logprobs is None
        assert (back.eid, back.task_id, back.group_id, back.reward, back.info, back.metrics) == (
            original.eid, "t", "g", 1.0, {"turns": 1}, {"accuracy": 1.0}
        )
        assert torch.equal(back.sampling_mask.counts, original.sampling_mask.counts)
        assert torch.equal(back.sampling_mask.token_ids, original.sampling_mask.token_ids)
        assert back.sampling_mask.temperature == 1.0


def test_tensors_from_read_only_buffers_are_copies_that_can_be_written():
    original = experience()
    back = out_of_band_round_trip(original)  # (its buffers are views of the original's memory)
    back.advantages[0] = 2.0
    assert back.advantages.tolist() == [2.0, 0.5, 0.5]
    assert original.advantages.tolist() == [0.5, 0.5, 0.5]


def test_the_pickled_state_holds_arrays_and_the_record_itself_keeps_its_tensors():
    original = experience()
    state = original.__getstate__()
    assert type(state["tokens"]).__module__ == "numpy" and state["logprobs"].dtype.name == "float32"
    assert isinstance(original.tokens, torch.Tensor)


def test_a_slice_pickles_its_own_elements_not_its_whole_storage():
    long_sequence = torch.arange(100_000)
    small = experience(tokens=long_sequence[:5])
    assert len(pickle.dumps(small)) < 5_000


def test_what_numpy_cannot_hold_stays_a_tensor():
    state = {"half": torch.ones(3, dtype=torch.bfloat16), "grad": torch.ones(2, requires_grad=True), "none": None}
    converted = tensors_to_arrays(state, state)
    assert converted["half"] is state["half"] and converted["grad"] is state["grad"] and converted["none"] is None
    assert arrays_to_tensors(dict(converted), state)["half"] is state["half"]


def test_records_pickled_before_keep_loading():
    """A state that still holds tensors (pickled before arrays were used) is taken as it is."""
    original = experience()
    restored = Experience.__new__(Experience)
    restored.__setstate__(dict(original.__dict__))
    assert restored.tokens is original.tokens
