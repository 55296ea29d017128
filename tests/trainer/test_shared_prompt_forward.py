"""Rows sharing a prompt share one prompt pass; logprobs and gradients equal the full forward."""

import torch

from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience
from trivium.trainer import forward
from trivium.trainer.forward import prompt_groups, response_logprobs


def grouped_experiences(vocab: int, samples: int = 4) -> list[Experience]:
    """Three prompts of different lengths, ``samples`` responses of different lengths each."""
    generator = torch.Generator().manual_seed(0)
    experiences = []
    for group, prompt_len in enumerate((7, 12, 4)):
        prompt = torch.randint(3, vocab, (prompt_len,), generator=generator)
        for sample in range(samples):
            response = torch.randint(3, vocab, (3 + (sample * 2 + group) % 6,), generator=generator)
            experiences.append(
                Experience(tokens=torch.cat([prompt, response]), prompt_length=prompt_len, reward=1.0, group_id=f"g{group}")
            )
    return experiences


def logprobs_and_grads(model, batch, share):
    model.zero_grad()
    logprobs, _ = response_logprobs(model, batch, share_prompts=share)
    (logprobs * batch.response_mask).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), grads


def test_shared_prompt_pass_equals_the_full_forward(model):
    batch = ExperienceBatch.from_experiences(grouped_experiences(model.config.vocab_size), pad_token_id=0)
    groups = prompt_groups(model, batch)
    assert groups is not None
    first_rows, row_to_distinct = groups
    assert len(first_rows) == 3
    assert all(row_to_distinct[first_rows[row_to_distinct[r]]] == row_to_distinct[r] for r in range(batch.batch_size))

    shared, shared_grads = logprobs_and_grads(model, batch, share=True)
    full, full_grads = logprobs_and_grads(model, batch, share=False)
    mask = batch.response_mask.bool()
    assert torch.allclose(shared[mask], full[mask], atol=1e-5)
    assert shared_grads.keys() == full_grads.keys()
    for name in full_grads:
        assert torch.allclose(shared_grads[name], full_grads[name], atol=1e-5, rtol=1e-4), name


def test_the_shared_pass_runs_only_when_prompts_repeat(model, monkeypatch):
    distinct = [e for e in grouped_experiences(model.config.vocab_size, samples=1)]
    batch = ExperienceBatch.from_experiences(distinct, pad_token_id=0)
    assert prompt_groups(model, batch) is None
    calls = []
    monkeypatch.setattr(forward, "_shared_prompt_logits", lambda *a: calls.append(1))
    response_logprobs(model, batch)
    assert calls == []
