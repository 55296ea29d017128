"""Sampling-mask replay: the trainer scores each response token over the set the engine kept.

With top-k / top-p truncation the engine samples from a truncated, renormalised distribution
at temperature T; with replay it records each token's kept set and that distribution's
logprob, and the trainer recomputes ``z_t / T - logsumexp(z[kept] / T)``, so with unchanged
weights the ratio trainer / engine is 1 for every token.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience
from trivium.core.sampling_mask import CAPPED, SamplingMask
from trivium.errors import UserError
from trivium.models.engine.hf import HFEngine
from trivium.models.wrapper import ModelWrapper
from trivium.trainer.forward import cheapest_forward, response_logprobs
from trivium.trainer.packed_attention import use_packed_attention
from trivium.trainer.sampling_mask import kept_set_logprobs, require_sampling_masks, sampling_mask_metrics


def test_the_renormalised_logprob_equals_the_hand_computed_one():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [2.0, 1.0, 0.0, -1.0]], requires_grad=True)
    labels = torch.tensor([2, 1])
    kept = torch.tensor([[0, 2], [-1, -1]])  # row 1: no set, the whole vocabulary
    temperature = torch.tensor([2.0, 2.0])
    logprobs = kept_set_logprobs(logits, labels, kept, temperature)
    # z / T = [1, 0.5, 0, -0.5]. Row 0 over {0, 2}: 0 - log(e^1 + e^0) = -1.3132617.
    # Row 1 over all four: 0.5 - log(2.7182818 + 1.6487213 + 1 + 0.6065307) = 0.5 - 1.7873387.
    assert logprobs[0].item() == pytest.approx(-math.log(math.e + 1), abs=1e-6)
    assert logprobs[0].item() == pytest.approx(-1.3132617, abs=1e-6)
    assert logprobs[1].item() == pytest.approx(-1.2873387, abs=1e-6)
    logprobs.sum().backward()
    # d/dz_v of row 0: (1[v = t] - p_v) / T inside the set, 0 outside: p = [e/(e+1), ., 1/(e+1), .]
    p0 = math.e / (math.e + 1)
    expected = torch.tensor([-p0 / 2, 0.0, (1 - (1 - p0)) / 2, 0.0])
    torch.testing.assert_close(logits.grad[0], expected, atol=1e-6, rtol=0)
    assert torch.isfinite(logits.grad).all()


def test_a_mask_packs_its_sets_and_pads_them_for_a_batch():
    mask = SamplingMask.from_sets([[7, 3], 0, [5], CAPPED], temperature=0.7)
    assert mask.counts.tolist() == [2, 0, 1, -1] and mask.token_ids.tolist() == [3, 7, 5]
    assert mask.sets() == [[3, 7], None, [5], None]
    assert mask.padded(2).tolist() == [[3, 7], [-1, -1], [5, -1], [-1, -1]]
    assert SamplingMask.from_dict(mask.to_dict()).sets() == mask.sets()
    with pytest.raises(ValueError, match="counts add up to 3"):
        SamplingMask(torch.tensor([2, 1]), torch.tensor([1, 2, 3, 4]))
    with pytest.raises(ValueError, match="covers 4 tokens"):
        Experience(tokens=torch.arange(6), prompt_length=3, sampling_mask=mask)


@pytest.fixture(scope="module")
def sampled(tiny_model_dir):
    """Experiences of a real hf-engine generation with top-k 5 at temperature 0.8, sets recorded:
    two prompts, four samples each (so the shared-prompt forward applies)."""
    engine = HFEngine.from_pretrained(tiny_model_dir, sampling_mask_cap=64, seed=3)
    wrapper = ModelWrapper(
        engine, max_response_tokens=10, default_rollout_args={"top_k": 5, "temperature": 0.8}
    )
    groups = wrapper.generate(["12+7=", "3+4="], n=4)
    wrapper.close()
    return [e for group in groups for e in group]


@pytest.fixture
def trainer_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def test_the_engine_records_top_k_sets_that_hold_each_sampled_token(sampled):
    for experience in sampled:
        mask = experience.sampling_mask
        assert mask is not None and mask.temperature == pytest.approx(0.8)
        assert mask.counts.tolist() == [5] * experience.response_length
        for token, kept in zip(experience.response_tokens.tolist(), mask.sets()):
            assert token in kept


def test_with_top_k_the_ratio_trainer_over_engine_is_one_only_with_replay(sampled, trainer_model):
    batch = ExperienceBatch.from_experiences(sampled)
    trained = batch.response_mask.bool()
    with torch.no_grad():
        replayed, _ = response_logprobs(trainer_model, batch, replay_sampling_mask=True)
        full, _ = response_logprobs(trainer_model, batch, replay_sampling_mask=False)
    ratio = (replayed - batch.old_logprobs).exp()[trained]
    assert (ratio - 1).abs().max().item() < 1e-5
    # Without replay the trainer's full-vocabulary logprob is below the truncated one's.
    unreplayed = (full - batch.old_logprobs).exp()[trained]
    assert (unreplayed < 1 - 1e-3).all()


ROUTES = {
    "padded": {"share_prompts": False, "pack_sequences": False},
    "shared": {"share_prompts": True, "pack_sequences": False},
    "packed": {"share_prompts": False, "pack_sequences": True},
}


def logprobs_and_grads(model, batch, **options):
    model.zero_grad()
    logprobs, _ = response_logprobs(model, batch, replay_sampling_mask=True, **options)
    (logprobs * batch.response_mask).sum().backward()
    return logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_every_forward_route_gives_the_same_replayed_logprobs_and_gradients(sampled, trainer_model):
    use_packed_attention(trainer_model)
    batch = ExperienceBatch.from_experiences(sampled)
    trained = batch.response_mask.bool()
    reference, reference_grads = logprobs_and_grads(trainer_model, batch, **ROUTES["padded"])
    for name, route in ROUTES.items():
        assert cheapest_forward(trainer_model, batch, **route)[0] == name
        for chunk in (None, 4):  # 4 positions per chunk: the chunked head, several chunks per batch
            if name == "padded" and chunk is None:
                continue
            logprobs, grads = logprobs_and_grads(trainer_model, batch, chunk_tokens=chunk, **route)
            torch.testing.assert_close(logprobs[trained], reference[trained], atol=1e-5, rtol=1e-5)
            for param, grad in reference_grads.items():
                torch.testing.assert_close(
                    grads[param], grad, atol=1e-5, rtol=1e-4, msg=f"{name} {chunk} {param}"
                )
    assert (reference[trained] - batch.old_logprobs[trained]).abs().max() < 1e-5


def test_sets_over_the_cap_fall_back_to_the_whole_vocabulary_on_both_sides(tiny_model_dir, trainer_model):
    engine = HFEngine.from_pretrained(tiny_model_dir, sampling_mask_cap=4, seed=5)
    wrapper = ModelWrapper(
        engine, max_response_tokens=6, default_rollout_args={"top_k": 5, "temperature": 0.8}
    )
    experiences = wrapper.generate(["12+7="], n=2)[0]
    wrapper.close()
    assert all(e.sampling_mask.counts.tolist() == [CAPPED] * e.response_length for e in experiences)
    batch = ExperienceBatch.from_experiences(experiences)
    with torch.no_grad():
        replayed, _ = response_logprobs(trainer_model, batch, replay_sampling_mask=True)
    trained = batch.response_mask.bool()
    assert (replayed - batch.old_logprobs)[trained].abs().max() < 1e-5
    metrics = sampling_mask_metrics(experiences)
    assert metrics["sampling_mask/capped_share"] == 1.0 and metrics["sampling_mask/mean_kept"] == 0.0


def test_replay_metrics_and_missing_sets(sampled):
    metrics = sampling_mask_metrics(sampled)
    assert metrics == {
        "sampling_mask/mean_kept": 5.0,
        "sampling_mask/max_kept": 5.0,
        "sampling_mask/capped_share": 0.0,
    }
    bare = Experience(tokens=torch.arange(6), prompt_length=3, task_id="t9")
    with pytest.raises(UserError, match="1 of 2 experiences carry no sampling mask"):
        require_sampling_masks([sampled[0], bare])


def test_a_multi_turn_episode_carries_sets_for_model_tokens_only(tiny_model_dir, trainer_model):
    engine = HFEngine.from_pretrained(tiny_model_dir, sampling_mask_cap=64, seed=0)
    wrapper = ModelWrapper(
        engine,
        max_response_tokens=4,
        max_model_len=256,
        default_rollout_args={"top_k": 3, "temperature": 0.7},
    )
    messages = [{"role": "user", "content": "Find the goal."}]
    for turn in range(2):
        (episode,) = wrapper.chat(messages)
        messages = messages + [
            {"role": "assistant", "content": episode.response_text if turn == 0 else ""},
            {"role": "user", "content": f"observation {turn}"},
        ]
    wrapper.close()
    counts = episode.sampling_mask.counts
    assert episode.info["model_turns"] == 2 and counts.numel() == episode.response_length
    assert counts[episode.action_mask].eq(3).all() and counts[~episode.action_mask].eq(0).all()
    batch = ExperienceBatch.from_experiences([episode])
    with torch.no_grad():
        replayed, _ = response_logprobs(trainer_model, batch, replay_sampling_mask=True)
    trained = batch.response_mask.bool()
    assert (replayed - batch.old_logprobs)[trained].abs().max() < 1e-5
