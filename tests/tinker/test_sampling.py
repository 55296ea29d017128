"""Sampling through the official SDK: tokens with the logprobs of the weights they came from."""

import pytest
import torch

tinker = pytest.importorskip("tinker")
from tinker import types

PROMPT = [20, 21, 14, 22, 23]


def trained_client(training_client):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT),
        loss_fn_inputs={"target_tokens": [21, 14, 22, 23, 32], "weights": [1.0] * 5},
    )
    training_client.forward_backward([datum], "cross_entropy")
    training_client.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    return training_client


def test_sampled_logprobs_equal_a_fresh_forward(training_client):
    client = trained_client(training_client)
    sampler = client.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=3, stop=[])
    result = sampler.sample(
        types.ModelInput.from_ints(PROMPT), num_samples=4, sampling_params=params
    ).result()
    assert len(result.sequences) == 4
    for sequence in result.sequences:
        assert len(sequence.tokens) == 6 and sequence.stop_reason == "length"
        tokens = PROMPT + sequence.tokens
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:]}
        )
        scored = client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
        torch.testing.assert_close(
            torch.tensor(sequence.logprobs), scored[len(PROMPT) - 1 :], atol=1e-4, rtol=0
        )


def test_a_snapshot_keeps_its_weights_while_training_goes_on(training_client):
    client = trained_client(training_client)
    sampler = client.save_weights_and_get_sampling_client().result()
    greedy = types.SamplingParams(max_tokens=4, temperature=0.0, stop=[])
    before = sampler.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0]
    for _ in range(3):
        trained_client(client)
    after = sampler.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0]
    assert after.tokens == before.tokens
    assert after.logprobs == pytest.approx(before.logprobs, abs=1e-6)


def test_a_stop_token_ends_the_sequence_and_is_kept(training_client):
    sampler = training_client.save_weights_and_get_sampling_client().result()
    greedy = types.SamplingParams(max_tokens=5, temperature=0.0, stop=[])
    free = sampler.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0].tokens
    stop_at = free[1]
    first = free.index(stop_at)
    stopped = types.SamplingParams(max_tokens=5, temperature=0.0, stop=[stop_at])
    sequence = sampler.sample(types.ModelInput.from_ints(PROMPT), 1, stopped).result().sequences[0]
    assert sequence.tokens == free[: first + 1]
    assert sequence.stop_reason == "stop"


def test_sampling_a_saved_checkpoint_by_path(training_client, service_client):
    client = trained_client(training_client)
    path = client.save_weights_for_sampler("sampler-a").result().path
    assert "/sampler_weights/sampler-a" in path
    greedy = types.SamplingParams(max_tokens=4, temperature=0.0, stop=[])
    live = client.save_weights_and_get_sampling_client().result()
    from_disk = service_client.create_sampling_client(model_path=path).result()
    expected = live.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0]
    loaded = from_disk.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0]
    assert loaded.tokens == expected.tokens
    assert loaded.logprobs == pytest.approx(expected.logprobs, abs=1e-5)


def test_prompt_logprobs_score_the_prompt(training_client):
    sampler = training_client.save_weights_and_get_sampling_client().result()
    logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(PROMPT)).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT[:-1]), loss_fn_inputs={"target_tokens": PROMPT[1:]}
    )
    scored = (
        training_client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    )
    assert logprobs[0] is None
    assert logprobs[1:] == pytest.approx(scored, abs=1e-4)


def test_a_base_model_sampler_samples_the_untrained_weights(training_client, service_client):
    greedy = types.SamplingParams(max_tokens=4, temperature=0.0, stop=[])
    untrained = training_client.save_weights_and_get_sampling_client().result()
    base = service_client.create_sampling_client(base_model="tiny").result()
    expected = untrained.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0]
    sampled = base.sample(types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0]
    assert sampled.tokens == expected.tokens
    assert sampled.logprobs == pytest.approx(expected.logprobs, abs=1e-5)


def test_old_in_memory_snapshots_are_dropped_with_a_clear_error(training_client):
    from trivium.tinker_server.state import SNAPSHOTS_PER_MODEL

    samplers = [
        training_client.save_weights_and_get_sampling_client().result()
        for _ in range(SNAPSHOTS_PER_MODEL + 1)
    ]
    params = types.SamplingParams(max_tokens=1, temperature=0.0, stop=[])
    assert len(samplers[-1].sample(types.ModelInput.from_ints(PROMPT), 1, params).result().sequences) == 1
    with pytest.raises(tinker.BadRequestError, match="save_weights_for_sampler"):
        samplers[0].sample(types.ModelInput.from_ints(PROMPT), 1, params).result()
