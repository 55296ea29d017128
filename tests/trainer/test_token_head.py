"""The chunked head: per-token logprob and entropy equal the full logits' ones, gradients included."""

from __future__ import annotations

import pytest
import torch

from trivium.core.batch import ExperienceBatch
from trivium.trainer.forward import cheapest_forward, response_logprobs
from trivium.trainer.packed_attention import use_packed_attention
from trivium.trainer.token_head import chunked_token_head, logit_chunk_tokens

from .conftest import make_experiences
from .test_sequence_packing import experience, mixed_lengths


def statistics_and_grads(model, batch, *, chunk, **route):
    model.zero_grad()
    logprobs, entropy = response_logprobs(model, batch, with_entropy=True, chunk_tokens=chunk, **route)
    mask = batch.response_mask
    # A loss that reaches the head through both outputs.
    ((logprobs * mask).sum() + 0.1 * (entropy * mask).sum()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), entropy.detach(), grads


def assert_same(model, batch, route: dict, expected_route: str):
    assert cheapest_forward(model, batch, **route)[0] == expected_route
    # 5 positions per chunk: every micro-batch here spans several chunks, one of them partial.
    whole = statistics_and_grads(model, batch, chunk=None, **route)
    chunked = statistics_and_grads(model, batch, chunk=5, **route)
    mask = batch.response_mask.bool()
    for full, part in zip(whole[:2], chunked[:2]):
        torch.testing.assert_close(part[mask], full[mask], atol=1e-5, rtol=1e-5)
    assert chunked[2].keys() == whole[2].keys()
    for name, grad in whole[2].items():
        torch.testing.assert_close(chunked[2][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_the_padded_forward_chunked_equals_the_whole_head(model):
    batch = ExperienceBatch.from_experiences(make_experiences(vocab=model.config.vocab_size))
    assert_same(model, batch, {"share_prompts": False, "pack_sequences": False}, "padded")


def test_the_shared_prompt_forward_chunked_equals_the_whole_head(model):
    same_prompt = [experience(list(range(3, 13)), [20 + i, 21, 22, 23, 24 + i]) for i in range(6)]
    batch = ExperienceBatch.from_experiences(same_prompt)
    assert_same(model, batch, {"share_prompts": True, "pack_sequences": False}, "shared")


def test_the_packed_forward_chunked_equals_the_whole_head(model):
    use_packed_attention(model)
    batch = ExperienceBatch.from_experiences(mixed_lengths(model.config.vocab_size), pad_token_id=0)
    assert_same(model, batch, {"share_prompts": False, "pack_sequences": True}, "packed")


def test_the_head_is_restored_after_the_block(model):
    head = model.get_output_embeddings()
    with chunked_token_head(model, 8) as statistics:
        assert statistics is not None and head.forward is statistics
    assert "forward" not in vars(head)
    hidden = torch.randn(2, 3, model.config.hidden_size)
    assert head(hidden).shape == (2, 3, model.config.vocab_size)


def test_the_chunk_size_follows_the_vocabulary(model):
    assert logit_chunk_tokens(None, model) is None  # small vocabularies: one matmul
    model.config.vocab_size = 151_936
    assert logit_chunk_tokens(None, model) == 1024
    assert logit_chunk_tokens(0, model) is None and logit_chunk_tokens(64, model) == 64


def test_a_head_that_is_not_a_plain_linear_layer_is_left_alone():
    class Wrapped(torch.nn.Linear):
        pass

    model = torch.nn.Module()
    model.get_output_embeddings = lambda: Wrapped(4, 4)
    with chunked_token_head(model, 8) as statistics:
        assert statistics is None


def test_targets_that_do_not_match_the_positions_are_an_error(model):
    with chunked_token_head(model, 8) as statistics, pytest.raises(RuntimeError, match="targets"):
        statistics.targets = torch.zeros(2, 3, dtype=torch.long)
        statistics(torch.randn(2, 4, model.config.hidden_size))
