"""The hf engine against the transformers model it wraps, on both architecture families."""

import pytest
import torch

from trivium.errors import UserError
from trivium.models.engine import SamplingParams, create_engine
from trivium.models.engine.fast_decoder import FastDecoder
from trivium.models.engine.hf_decoder import HFDecoder

PROMPTS = [[11, 25, 37, 42, 56, 61, 70], [90, 12, 33], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]


@pytest.fixture(scope="module")
def engine(model_path):
    return create_engine("hf", model_path=model_path, seed=0, dtype="float32")


def hf_greedy(model, prompt, max_new_tokens, **kwargs):
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        **kwargs,
    )
    return out[0, len(prompt) :].tolist()


def test_fast_decoder_is_chosen_for_llama_and_qwen2(engine):
    assert isinstance(engine.decoder, FastDecoder)


def test_greedy_equals_model_generate_token_for_token(engine):
    params = SamplingParams(temperature=0, max_tokens=16, min_tokens=16)
    outputs = engine.generate(PROMPTS, params)  # one left-padded batch of three lengths
    for prompt, (output,) in zip(PROMPTS, outputs):
        assert output.token_ids == hf_greedy(engine.model, prompt, 16)
        assert output.finish_reason == "length"


def test_logprobs_match_the_model_forward(engine):
    outputs = engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_tokens=16, seed=3))
    for prompt, (output,) in zip(PROMPTS, outputs):
        sequence = torch.tensor([prompt + output.token_ids])
        with torch.no_grad():
            logits = engine.model(sequence).logits[0].float()
        reference = logits[:-1].log_softmax(-1).gather(1, sequence[0, 1:, None]).squeeze(1)[len(prompt) - 1 :]
        assert len(output.logprobs) == len(output.token_ids)
        assert torch.allclose(torch.tensor(output.logprobs), reference, atol=1e-4)
        scored = engine.compute_logprobs([prompt + output.token_ids], [len(prompt)])[0]
        assert torch.allclose(scored, reference, atol=1e-5)


def test_a_replay_reports_the_logprobs_sampling_reported(engine):
    # The self-check's path: the sampled responses forced back through the decoding loop.
    params = SamplingParams(n=2, temperature=0.8, top_k=40, max_tokens=10, seed=5)
    samples = [s for group in engine.generate(PROMPTS, params) for s in group]
    sequences = [s.prompt_ids + s.token_ids for s in samples]
    replayed = engine.replay_logprobs(sequences, [len(s.prompt_ids) for s in samples])
    for sample, logprobs in zip(samples, replayed):
        assert logprobs.shape == (len(sample.token_ids),)
        assert torch.allclose(logprobs, torch.tensor(sample.logprobs), atol=1e-5)


def test_a_replay_runs_past_a_forced_end_of_sequence_id(engine):
    eos = engine.default_stop_ids[0]
    sequences = [PROMPTS[0] + [40, eos, 41, 42], PROMPTS[1] + [7], PROMPTS[2]]
    prompt_lengths = [len(PROMPTS[0]), len(PROMPTS[1]), len(PROMPTS[2])]
    replayed = engine.replay_logprobs(sequences, prompt_lengths)
    scored = engine.compute_logprobs(sequences, prompt_lengths)
    assert [r.shape[0] for r in replayed] == [4, 1, 0]
    for got, expected in zip(replayed, scored):
        assert torch.allclose(got, expected, atol=1e-4)


def test_logprobs_ignore_temperature(engine):
    hot = engine.generate(PROMPTS[:1], SamplingParams(temperature=2.5, max_tokens=8, seed=1))[0][0]
    scored = engine.compute_logprobs([PROMPTS[0] + hot.token_ids], [len(PROMPTS[0])])[0]
    assert torch.allclose(torch.tensor(hot.logprobs), scored, atol=1e-4)


def test_top_k_1_equals_greedy(engine):
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12))
    top1 = engine.generate(PROMPTS, SamplingParams(temperature=1.0, top_k=1, max_tokens=12, seed=7))
    assert [o[0].token_ids for o in greedy] == [o[0].token_ids for o in top1]


def test_stops_on_a_stop_token_and_keeps_it(engine):
    free = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=10, min_tokens=10))[0][0]
    stop = free.token_ids[4]
    first = free.token_ids.index(stop)
    params = SamplingParams(temperature=0, max_tokens=10, min_tokens=0, stop_token_ids=(stop,))
    out = engine.generate(PROMPTS[:1], params)[0][0]
    assert out.token_ids == free.token_ids[: first + 1]
    assert out.finish_reason == "stop"


def test_min_tokens_suppresses_the_stop_token(engine):
    free = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=4, min_tokens=0))[0][0]
    stop = free.token_ids[0]  # greedy would stop immediately on this token
    early = engine.generate(
        PROMPTS[:1], SamplingParams(temperature=0, max_tokens=8, min_tokens=0, stop_token_ids=(stop,))
    )
    assert early[0][0].token_ids == [stop]
    held = engine.generate(
        PROMPTS[:1], SamplingParams(temperature=0, max_tokens=8, min_tokens=5, stop_token_ids=(stop,))
    )
    tokens = held[0][0].token_ids
    assert len(tokens) >= 6 and stop not in tokens[:5]


def test_default_stop_ids_are_the_models_eos(engine):
    assert engine.tokenizer.eos_token_id in engine.default_stop_ids


def test_n_samples_per_prompt_and_seeds_reproduce(engine):
    params = SamplingParams(temperature=1.0, max_tokens=12, min_tokens=12, n=3, seed=123)
    first = engine.generate(PROMPTS, params)
    again = engine.generate(PROMPTS, params)
    other = engine.generate(PROMPTS, params.with_overrides(seed=124))
    assert [len(o) for o in first] == [3, 3, 3]
    tokens = lambda outs: [[s.token_ids for s in o] for o in outs]
    assert tokens(first) == tokens(again)
    assert tokens(first) != tokens(other)
    assert len({tuple(s.token_ids) for s in first[0]}) == 3  # the n samples differ


def test_repetition_penalty_matches_model_generate(engine):
    params = SamplingParams(temperature=0, max_tokens=16, min_tokens=16, repetition_penalty=1.5)
    ours = engine.generate(PROMPTS[:1], params)[0][0].token_ids
    assert ours == hf_greedy(engine.model, PROMPTS[0], 16, repetition_penalty=1.5)


def test_max_model_len_limits_the_response(model_path):
    engine = create_engine("hf", model_path=model_path, seed=0, max_model_len=12)
    out = engine.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=50, min_tokens=50))[0][0]
    assert len(out.token_ids) == 12 - len(PROMPTS[0]) and out.finish_reason == "length"
    with pytest.raises(UserError, match="max_model_len"):
        engine.generate([list(range(5, 20))], SamplingParams(max_tokens=4))


def test_update_weights_changes_outputs_and_confirms_the_version(model_path):
    engine = create_engine("hf", model_path=model_path, seed=0)
    params = SamplingParams(temperature=0, max_tokens=10, min_tokens=10)
    before = engine.generate(PROMPTS, params)
    assert engine.version() == 0 and before[0][0].model_version == 0
    generator = torch.Generator().manual_seed(5)
    new_weights = {
        name: tensor + 0.05 * torch.randn(tensor.shape, generator=generator)
        for name, tensor in engine.model.state_dict().items()
        if name.endswith("proj.weight")
    }
    assert engine.update_weights(new_weights, version=3) == 3
    after = engine.generate(PROMPTS, params)
    assert engine.version() == 3 and after[0][0].model_version == 3
    assert [o[0].token_ids for o in after] != [o[0].token_ids for o in before]
    # The fused fast-path weights follow the model: greedy still equals model.generate.
    assert after[1][0].token_ids == hf_greedy(engine.model, PROMPTS[1], 10)
    with pytest.raises(ValueError, match="does not have"):
        engine.update_weights({"not.a.weight": torch.zeros(1)}, version=4)


def test_in_place_weight_changes_are_picked_up(model_path):
    engine = create_engine("hf", model_path=model_path, seed=0)
    params = SamplingParams(temperature=0, max_tokens=8, min_tokens=8)
    engine.generate(PROMPTS[:1], params)
    with torch.no_grad():  # e.g. an optimizer step on a model shared with the trainer
        engine.model.model.layers[0].self_attn.q_proj.weight.mul_(3.0)
        engine.model.model.layers[1].mlp.up_proj.weight.mul_(-1.0)
    assert engine.generate(PROMPTS[:1], params)[0][0].token_ids == hf_greedy(engine.model, PROMPTS[0], 8)


def test_generic_decoder_matches_model_generate(model_path):
    engine = create_engine("hf", model_path=model_path, seed=0, use_fast_decoder=False)
    assert isinstance(engine.decoder, HFDecoder)
    outputs = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=10, min_tokens=10))
    for prompt, (output,) in zip(PROMPTS, outputs):
        assert output.token_ids == hf_greedy(engine.model, prompt, 10)
    sampled = engine.generate(PROMPTS[:1], SamplingParams(max_tokens=8, seed=0))[0][0]
    scored = engine.compute_logprobs([PROMPTS[0] + sampled.token_ids], [len(PROMPTS[0])])[0]
    assert torch.allclose(torch.tensor(sampled.logprobs), scored, atol=1e-4)


def test_finished_rows_are_dropped_without_changing_the_others(engine):
    # Row 0 stops at once on its own stop id, the others run on: compaction must keep them exact.
    free = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=20, min_tokens=20))
    params = [
        SamplingParams(temperature=0, max_tokens=20, min_tokens=0, stop_token_ids=(free[0][0].token_ids[0],)),
        *[SamplingParams(temperature=0, max_tokens=20, min_tokens=20)] * 2,
    ]
    prompts = PROMPTS + PROMPTS[1:] * 2  # 5 rows so compaction triggers
    params = params + params[1:] * 2
    mixed = engine.generate(prompts, params)
    assert mixed[0][0].token_ids == free[0][0].token_ids[:1]
    for i in range(1, 5):
        assert mixed[i][0].token_ids == free[1 + (i - 1) % 2][0].token_ids


def test_bad_input_is_a_clear_error(engine):
    with pytest.raises(UserError, match="empty"):
        engine.generate([[]], SamplingParams())
    with pytest.raises(UserError, match="token ids outside"):
        engine.generate([[10**6]], SamplingParams())
    with pytest.raises(UserError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(UserError, match="Unknown engine type|Did you mean"):
        create_engine("hff", model_path="x")
