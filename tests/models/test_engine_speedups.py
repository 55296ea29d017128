"""The fast decoder's shortcuts against the plain Hugging Face forward.

Packed prefill (prompts grouped by length), the in-place transposed key cache, the split
MLP paths, bias folding, row dropping, and the sampler's single-softmax path must all give
what the reference model gives.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trivium.models.engine import fast_decoder
from trivium.models.engine.base import SamplingParams
from trivium.models.engine.fast_decoder import FastDecoder
from trivium.models.engine.generation import distinct_prompts, left_pad, prefill_rows, sample_rows
from trivium.models.engine.sampling import BatchSampler

VOCAB = 97


def tiny_llama(**overrides) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        **overrides,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # random norm weights and biases, so folding them is really tested
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
    return model


def prompts_with_repeated_lengths() -> list[list[int]]:
    generator = torch.Generator().manual_seed(1)
    lengths = [5, 9, 5, 1, 12, 9, 9, 3]  # groups of equal length, a single token, the widest row
    return [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def reference_next_logits(model, sequences: list[list[int]]) -> torch.Tensor:
    """Last-position logits of each sequence, one unpadded forward per sequence."""
    with torch.no_grad():
        return torch.stack([model(torch.tensor([s])).logits[0, -1].float() for s in sequences])


def run_decoder(decoder, prompts, continuations):
    """Prefill the prompts, then feed ``continuations[step]`` (one token per row) step by step."""
    input_ids, mask = left_pad(prompts, pad_token_id=0)
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    steps = len(continuations)
    logits = [decoder.prefill(input_ids, mask, positions, capacity=input_ids.shape[1] + steps)]
    next_position = positions[:, -1] + 1
    for step, tokens in enumerate(continuations):
        logits.append(decoder.decode(tokens, next_position + step))
    return logits


@pytest.mark.parametrize("fuse", [True, False], ids=["fused-copies", "views"])
@pytest.mark.parametrize(
    "overrides",
    [{}, {"attention_bias": True, "mlp_bias": True}],
    ids=["no-bias", "all-biases"],
)
def test_packed_prefill_and_decode_match_the_model_forward(overrides, fuse):
    model = tiny_llama(**overrides)
    prompts = prompts_with_repeated_lengths()
    generator = torch.Generator().manual_seed(2)
    continuations = [torch.randint(0, VOCAB, (len(prompts),), generator=generator) for _ in range(6)]
    logits = run_decoder(FastDecoder(model, fuse=fuse), prompts, continuations)
    for step, step_logits in enumerate(logits):
        sequences = [p + [int(c[row]) for c in continuations[:step]] for row, p in enumerate(prompts)]
        assert torch.allclose(step_logits, reference_next_logits(model, sequences), atol=1e-4), step


def test_both_mlp_paths_give_the_same_result(monkeypatch):
    model = tiny_llama(mlp_bias=True)
    prompts = prompts_with_repeated_lengths()
    continuations = [torch.full((len(prompts),), 7)] * 2
    batched = run_decoder(FastDecoder(model), prompts, continuations)
    monkeypatch.setattr(fast_decoder, "BATCHED_MLP_MAX_ROWS", 0)  # every call takes the two-matmul path
    split = run_decoder(FastDecoder(model), prompts, continuations)
    for a, b in zip(batched, split):
        assert torch.allclose(a, b, atol=1e-5)


def test_past_the_size_limit_the_decoder_computes_with_the_model_weights_themselves(monkeypatch):
    model = tiny_llama(attention_bias=True)
    layers = sum(p.numel() * 4 for p in model.model.layers.parameters())
    assert fast_decoder.fused_copy_bytes(model) == layers + VOCAB * 64 * 4
    assert FastDecoder(model).fuse  # a small model: fused copies
    monkeypatch.setattr(fast_decoder, "FUSE_MAX_BYTES", fast_decoder.fused_copy_bytes(model) - 1)
    decoder = FastDecoder(model)
    assert not decoder.fuse
    decoder.bind_weights()
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    matrices = [m for w in decoder.layers for m in (*w.qkv, w.o, *w.gate_up, w.down)] + [decoder.lm_head]
    assert all(m.untyped_storage().data_ptr() in storages for m in matrices)  # views, no copies
    # An in-place change to the weights (an optimizer step) is what the next forward computes with.
    prompts = prompts_with_repeated_lengths()
    continuations = [torch.full((len(prompts),), 7)]
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(-2.0)
        model.model.layers[0].self_attn.q_proj.bias.add_(0.5)
    logits = run_decoder(decoder, prompts, continuations)
    assert torch.allclose(logits[0], reference_next_logits(model, prompts), atol=1e-4)


def test_dropping_rows_keeps_the_remaining_rows_exact():
    model = tiny_llama()
    prompts = prompts_with_repeated_lengths()
    decoder = FastDecoder(model)
    input_ids, mask = left_pad(prompts, pad_token_id=0)
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    decoder.prefill(input_ids, mask, positions, capacity=input_ids.shape[1] + 4)
    tokens = torch.arange(len(prompts)) + 10
    next_position = positions[:, -1] + 1
    decoder.decode(tokens, next_position)
    keep = torch.tensor([6, 1, 3])  # a new order, too
    decoder.keep_rows(keep)
    kept_logits = decoder.decode(tokens[keep] + 1, next_position[keep] + 1)
    sequences = [prompts[r] + [int(tokens[r]), int(tokens[r]) + 1] for r in keep.tolist()]
    assert torch.allclose(kept_logits, reference_next_logits(model, sequences), atol=1e-4)


def test_rows_with_the_same_prompt_share_one_prefill_and_stay_exact():
    model = tiny_llama()
    base = prompts_with_repeated_lengths()
    prompts = [base[0]] * 3 + [base[4]] * 2 + [base[3]]  # samples of three requests
    first_rows, row_to_distinct = distinct_prompts(prompts)
    assert first_rows.tolist() == [0, 3, 5] and row_to_distinct.tolist() == [0, 0, 0, 1, 1, 2]

    decoder = FastDecoder(model)
    calls = []
    prefill = decoder.prefill
    decoder.prefill = lambda ids, *args, **kwargs: calls.append(ids.shape[0]) or prefill(ids, *args, **kwargs)
    input_ids, mask = left_pad(prompts, pad_token_id=0)
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    first = prefill_rows(decoder, input_ids, mask, positions, prompts, capacity=input_ids.shape[1] + 2)
    assert calls == [3]  # one prefill row per distinct prompt
    assert torch.allclose(first, reference_next_logits(model, prompts), atol=1e-4)
    # Each row then decodes its own continuation from its own copy of the cache.
    tokens = torch.arange(len(prompts)) + 10
    logits = decoder.decode(tokens, positions[:, -1] + 1)
    sequences = [p + [int(t)] for p, t in zip(prompts, tokens)]
    assert torch.allclose(logits, reference_next_logits(model, sequences), atol=1e-4)


def test_decoding_past_the_allocated_capacity_is_an_error():
    decoder = FastDecoder(tiny_llama())
    input_ids, mask = left_pad([[1, 2, 3]], pad_token_id=0)
    decoder.prefill(input_ids, mask, torch.tensor([[0, 1, 2]]), capacity=4)
    decoder.decode(torch.tensor([5]), torch.tensor([3]))
    with pytest.raises(ValueError, match="cache is full"):
        decoder.decode(torch.tensor([5]), torch.tensor([4]))


def test_rows_with_different_max_tokens_stop_at_their_own_length():
    decoder = FastDecoder(tiny_llama())
    params = [SamplingParams(max_tokens=n, min_tokens=n, seed=0) for n in (2, 7, 4)]
    rows = sample_rows(
        decoder,
        [[3, 4], [5, 6, 7], [8]],
        params,
        [[1], [1], [1]],
        vocab_size=VOCAB,
        pad_token_id=0,
        generator=torch.Generator().manual_seed(0),
    )
    assert [len(r.token_ids) for r in rows] == [2, 7, 4]
    assert all(r.finish_reason == "length" and 1 not in r.token_ids for r in rows)


def test_plain_sampling_never_draws_a_blocked_stop_token_and_keeps_the_rest_proportional():
    # Token 0 is the stop id and holds half the mass; below min_tokens the other three share
    # the draw in their original ratio 1 : 2 : 1 (no second softmax, same distribution).
    probs = torch.tensor([0.5, 0.125, 0.25, 0.125])
    rows = 20000
    params = [SamplingParams(temperature=1.0, min_tokens=3)] * rows
    sampler = BatchSampler(params, [[0]] * rows, vocab_size=4)
    assert sampler.plain
    logits = probs.log().expand(rows, 4).contiguous()
    tokens, logprobs = sampler.sample(logits, step=0, seen=None, generator=torch.Generator().manual_seed(0))
    frequencies = torch.bincount(tokens, minlength=4).float() / rows
    assert frequencies[0] == 0
    # Standard error of each frequency is below 0.0035; 0.015 is over 4 sigma.
    assert torch.allclose(frequencies[1:], torch.tensor([0.25, 0.5, 0.25]), atol=0.015)
    # Logprobs stay those of the raw logits, blocking or not.
    assert torch.allclose(logprobs, probs.log()[tokens], atol=1e-6)
    # Past min_tokens the stop token is drawn again, about half of the time.
    tokens, _ = sampler.sample(logits, step=3, seen=None, generator=torch.Generator().manual_seed(1))
    assert abs(float((tokens == 0).float().mean()) - 0.5) < 0.02
