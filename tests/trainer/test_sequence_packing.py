"""Packed micro-batches (one row of real tokens, no padding) compute what padded ones do."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.trainer.critic import CriticModel
from trivium.trainer.forward import cheapest_forward, response_logprobs
from trivium.trainer.micro_batch import split_by_token_budget
from trivium.trainer.packed_attention import VARLEN_SDPA, sequence_rows, use_packed_attention
from trivium.trainer.packing import pack
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer


def experience(prompt: list[int], response: list[int], group: str = "g") -> Experience:
    return Experience(
        tokens=torch.tensor(prompt + response), prompt_length=len(prompt), reward=1.0, group_id=group,
        logprobs=torch.zeros(len(response)), advantages=torch.ones(len(response)),
    )


def mixed_lengths(vocab: int, rows: int = 12, seed: int = 0) -> list[Experience]:
    """Prompts of 3-15 tokens and responses of 1-40: most of a padded batch would be padding."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for row in range(rows):
        p = int(torch.randint(3, 16, (1,), generator=generator))
        r = int(torch.randint(1, 41, (1,), generator=generator))
        tokens = torch.randint(3, vocab, (p + r,), generator=generator)
        advantages = torch.randn(r, generator=generator)
        out.append(Experience(tokens=tokens, prompt_length=p, reward=(row % 3) / 2, group_id=f"g{row}",
                              logprobs=-torch.rand(r, generator=generator), advantages=advantages))
    return out


def test_pack_lays_real_tokens_end_to_end():
    # Row 0: prompt [5, 6], response [7, 8, 9]; row 1: prompt [10, 11, 12], response [13].
    batch = ExperienceBatch.from_experiences([experience([5, 6], [7, 8, 9]), experience([10, 11, 12], [13])])
    assert batch.input_ids.tolist() == [[0, 5, 6, 7, 8, 9], [10, 11, 12, 13, 0, 0]]
    packed = pack(batch)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9, 10, 11, 12, 13]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]
    assert packed.cu_seq_lens.tolist() == [0, 5, 9]
    assert packed.max_length == 5
    # Response token r of row 0 is predicted at packed positions 1, 2, 3; row 1's only one at
    # 7. Its padding slots (masked out of every loss) read position 8, its last token, and the
    # padding beyond the sequence reads position 0.
    assert packed.predicting.tolist() == [[1, 2, 3], [7, 8, 0]]
    assert packed.keep.tolist() == [0, 1, 2, 3, 7, 8]
    assert packed.keep[packed.kept_index].tolist() == packed.predicting.tolist()


def test_sequence_rows_right_pad_each_sequence():
    rows, back = sequence_rows(torch.tensor([0, 3, 4, 6], dtype=torch.int32), max_length=3)
    assert rows.tolist() == [[0, 1, 2], [3, 3, 3], [4, 5, 4]]
    # Packed position t sits at (sequence, offset) -> sequence * 3 + offset.
    assert back.tolist() == [0, 1, 2, 3, 6, 7]


def logprobs_and_grads(model, batch, packed):
    model.zero_grad()
    logprobs, _ = response_logprobs(model, batch, share_prompts=False, pack_sequences=packed)
    (logprobs * batch.response_mask).sum().backward()
    return logprobs.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attention", ["sdpa", VARLEN_SDPA])
def test_packed_forward_equals_the_padded_forward(model, attention):
    batch = ExperienceBatch.from_experiences(mixed_lengths(model.config.vocab_size), pad_token_id=0)
    assert batch.num_tokens < 0.6 * batch.input_ids.numel()  # mostly padding: a real test of packing
    padded, padded_grads = logprobs_and_grads(model, batch, packed=False)
    if attention == VARLEN_SDPA:
        use_packed_attention(model)
    assert model.config._attn_implementation == attention
    assert cheapest_forward(model, batch, share_prompts=False, pack_sequences=True)[0] == "packed"
    packed, packed_grads = logprobs_and_grads(model, batch, packed=True)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(packed[mask], padded[mask], atol=1e-5, rtol=1e-5)
    assert packed_grads.keys() == padded_grads.keys()
    for name in padded_grads:
        torch.testing.assert_close(packed_grads[name], padded_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_varlen_attention_leaves_padded_forwards_unchanged(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    batch = ExperienceBatch.from_experiences(mixed_lengths(model.config.vocab_size), pad_token_id=0)
    with torch.no_grad():
        before, _ = response_logprobs(model, batch, share_prompts=True)
        use_packed_attention(model)
        after, _ = response_logprobs(model, batch, share_prompts=True)
    assert torch.equal(before, after)


def test_the_cheapest_exact_forward_is_chosen(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    # Eight answers of 4 tokens to one 10-token prompt: padded 8 * 14 = 112 tokens, packed
    # 112 as well (no padding), shared 10 + 8 * 3 = 34.
    same_prompt = [experience(list(range(3, 13)), [20 + i, 21, 22, 23]) for i in range(8)]
    batch = ExperienceBatch.from_experiences(same_prompt)
    assert cheapest_forward(model, batch, share_prompts=True, pack_sequences=True)[0] == "shared"
    assert cheapest_forward(model, batch, share_prompts=False, pack_sequences=True)[0] == "padded"  # a tie
    # Distinct prompts of 2 and 9 tokens, responses of 1 and 8: padded 2 * 17 = 34, packed 20.
    distinct = ExperienceBatch.from_experiences([experience([3, 4], [5]), experience(list(range(3, 12)), list(range(12, 20)))])
    assert cheapest_forward(model, distinct, share_prompts=True, pack_sequences=True)[0] == "packed"
    assert cheapest_forward(model, distinct, share_prompts=True, pack_sequences=False)[0] == "padded"


def test_packed_token_budget_counts_real_tokens():
    # Real lengths 5, 4, 3, 2 (padded width 5).
    rows = [experience([3, 4], [5, 6, 7]), experience([3], [5, 6, 7]), experience([3, 4], [5]), experience([3], [5])]
    batch = ExperienceBatch.from_experiences(rows)
    # Padded: 5 + 5 > 9 -> one row each until widths allow; packed: 5 + 4 = 9, then 3 + 2.
    assert split_by_token_budget(batch, 9) == [[0], [1, 2], [3]]
    assert split_by_token_budget(batch, 9, packed=True) == [[0, 1], [2, 3]]


def test_packed_critic_values_equal_padded_ones(tiny_model_dir):
    critic = CriticModel.from_pretrained(tiny_model_dir)
    torch.nn.init.normal_(critic.value_head.weight, std=0.1)  # a zero head would hide any error
    batch = ExperienceBatch.from_experiences(mixed_lengths(critic.trunk.config.vocab_size), pad_token_id=0)
    with torch.no_grad():
        padded = critic.response_values(batch)
        use_packed_attention(critic.trunk)
        packed = critic.response_values(batch, packed=True)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(packed[mask], padded[mask], atol=1e-5, rtol=1e-5)


def step(tiny_model_dir, run_dir, *, packed: bool, experiences) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    settings = TrainerSettings(
        model_path=tiny_model_dir, lr=1e-3, use_critic=True, pack_sequences=packed, max_token_len_per_gpu=200,
        loss=LossSettings(policy_loss_fn="ppo", advantage_fn="ppo", kl_loss_fn="low_var_kl", kl_loss_coef=0.1),
    )
    torch.manual_seed(0)
    trainer = Trainer(settings, run_dir=run_dir)
    metrics = trainer.train_step(copy.deepcopy(experiences))
    weights = {name: tensor.clone() for name, tensor in trainer.weights_for_sync().items()}
    weights.update({f"critic.{name}": p.detach().clone() for name, p in trainer.critic.named_parameters()})
    return metrics, weights


def test_a_packed_training_step_equals_a_padded_one(tiny_model_dir, tmp_path):
    """Actor and critic, several micro-batches, reference KL and GAE: same loss, same update."""
    experiences = mixed_lengths(vocab=300, rows=16)
    for e in experiences:
        e.advantages = None  # computed by the trainer's GAE from the critic's values
    padded_metrics, padded_weights = step(tiny_model_dir, tmp_path / "padded", packed=False, experiences=experiences)
    packed_metrics, packed_weights = step(tiny_model_dir, tmp_path / "packed", packed=True, experiences=experiences)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss", "critic/vpred_mean"):
        assert packed_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-5, abs=1e-6), key
    assert padded_metrics["actor/grad_norm"] > 0
    # AdamW's first step moves every weight by about lr (1e-3) whatever its gradient's size, so
    # 1e-4 catches any wrong gradient; it allows a weight whose gradient is rounding noise.
    for name, value in padded_weights.items():
        torch.testing.assert_close(packed_weights[name], value, atol=1e-4, rtol=1e-5, msg=name)


def test_packing_is_refused_for_model_families_it_was_not_checked_on(tmp_path):
    directory = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)).save_pretrained(directory)
    with pytest.raises(UserError, match="use_remove_padding.*'gpt2'"):
        Trainer(TrainerSettings(model_path=str(directory), pack_sequences=True), run_dir=tmp_path / "run")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_packed_chunked_step_over_two_fsdp_ranks_equals_a_padded_step_in_one_process(tiny_model_dir, tmp_path):
    """Packed micro-batches run one forward each, so ranks stay in step; the sharded side also
    computes its head 7 positions at a time (trainer/token_head.py) inside FSDP2's forward
    (about 40 s: a second rank)."""
    experiences = mixed_lengths(vocab=300, rows=16)
    for e in experiences:
        e.advantages = None
    padded_metrics, padded_weights = step(tiny_model_dir, tmp_path / "padded", packed=False, experiences=experiences)
    settings = TrainerSettings(
        model_path=tiny_model_dir, lr=1e-3, use_critic=True, pack_sequences=True, max_token_len_per_gpu=200,
        data_parallel_size=2, collective_timeout=120, logit_chunk_tokens=7,
        loss=LossSettings(policy_loss_fn="ppo", advantage_fn="ppo", kl_loss_fn="low_var_kl", kl_loss_coef=0.1),
    )
    torch.manual_seed(0)
    sharded = Trainer(settings, run_dir=tmp_path / "sharded")
    try:
        metrics = sharded.train_step(copy.deepcopy(experiences))
        weights = sharded.weights_for_sync()
    finally:
        sharded.close()
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss"):
        assert metrics[key] == pytest.approx(padded_metrics[key], rel=1e-5, abs=1e-6), key
    assert weights.keys() == {name for name in padded_weights if not name.startswith("critic.")}
    for name, value in weights.items():
        torch.testing.assert_close(value, padded_weights[name], atol=1e-4, rtol=1e-5, msg=name)
