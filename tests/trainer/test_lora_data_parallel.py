"""LoRA (peft) on a trainer sharded with FSDP2 over 2 ranks (gloo, two processes on this CPU),
against the same steps in one process: the step, the reference (the adapter switched off),
the synced update and the checkpoints.

Each test starts a real second rank; a hung collective fails by the pytest timeout and by
the trainer's own collective timeout.
"""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from trivium.cli.main import main
from trivium.models.lora_delta import update_bytes
from trivium.sync.synchronizer import WeightUpdate, sync_weights_dir
from trivium.trainer import checkpoint as ckpt
from trivium.trainer.lora import adapter_parameters
from trivium.trainer.settings import LoRASettings, LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import assert_close_metrics, assert_close_weights, make_experiences

# Each test starts a second process (about 15 s on two busy cores).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

COMPARED = ["actor/pg_loss", "actor/kl_loss", "actor/grad_norm"]


def _grpo_with_kl(model_dir, *, sync_merged=False, **overrides):
    """token-mean GRPO with a KL loss to the reference; 8 rows in micro-batches of 3, an odd
    count over 2 ranks, so one rank also runs a weight-0 repeat."""
    settings = TrainerSettings(
        model_path=model_dir,
        lr=1e-2,
        micro_batch_size=3,
        collective_timeout=120,
        loss=LossSettings(
            policy_loss_fn="ppo", advantage_fn="grpo", kl_loss_fn="low_var_kl", kl_loss_coef=0.1, loss_agg_mode="token-mean"
        ),
        lora=LoRASettings(rank=4, alpha=8, sync_merged=sync_merged),
    )
    for key, value in overrides.items():
        setattr(settings, key, value)
    return settings


def _trainer(settings, run_dir, **kwargs) -> Trainer:
    # The adapter's A starts random: the same seed on rank 0 here and in the one process
    # (the 2-rank trainer gives rank 1 rank 0's values).
    torch.manual_seed(0)
    return Trainer(settings, run_dir=run_dir, **kwargs)


def _assert_close_metrics(one, two, keys=COMPARED):
    assert_close_metrics(one, two, keys)


def _copy(weights):
    return {name: tensor.detach().clone() for name, tensor in weights.items()}


def test_two_rank_lora_steps_sync_and_checkpoint_match_one_process(tiny_model_dir, tmp_path):
    """Two GRPO steps with a KL loss on 2 ranks equal one process's (loss, KL to the
    adapter-off reference, gradient norm, adapter); the synced update is the adapter alone,
    gathered whole, by either transport; the checkpoint holds the adapter in peft's format
    plus the shards, merges with ``convert --merge-lora``, and resumes on one rank (2 -> 1)
    to the same next step."""
    steps = [make_experiences(seed=seed) for seed in range(3)]
    single = _trainer(_grpo_with_kl(tiny_model_dir), tmp_path / "one")
    expected, expected_updates = [], []
    for experiences in steps:
        expected.append(single.train_step(experiences))
        expected_updates.append(_copy(single.weights_for_sync()))
    assert expected[1]["actor/kl_loss"] > 0, "the second step's KL to the reference must not vanish"

    run_dir = tmp_path / "two"
    sharded = _trainer(_grpo_with_kl(tiny_model_dir, data_parallel_size=2), run_dir,
                       tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir))
    try:
        optimized = [p for group in sharded.optimizer.param_groups for p in group["params"]]
        assert len(optimized) == len(adapter_parameters(sharded.actor)) == 2 * 7 * 4
        assert all(type(p).__name__ == "DTensor" for p in sharded.actor.parameters()), "base and adapter are sharded"
        got, updates = [], []
        for experiences in steps[:2]:
            got.append(sharded.train_step(experiences))
            updates.append(sharded.weights_for_sync())
        directory = sync_weights_dir(run_dir, sharded.model_version)
        written = sharded.write_sync_weights(str(directory))
        path = sharded.save_checkpoint(export_hf=True)
    finally:
        sharded.close()

    for one, two in zip(expected, got):
        _assert_close_metrics(one, two)
    for one, two in zip(expected_updates, updates):
        assert_close_weights(one, two)
    assert all(".lora_" in name for name in updates[1]), "the adapter alone travels"
    base_bytes = sum(t.numel() * t.element_size() for t in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters())
    assert update_bytes(updates[1]) < base_bytes / 10
    assert written["sync/buckets"] == 1
    assert_close_weights(expected_updates[1], WeightUpdate(version=2, path=str(directory)).load())

    actor_dir = path / "actor"
    assert (actor_dir / "adapter_config.json").is_file() and (actor_dir / "sharded" / ".metadata").is_file()
    assert not (actor_dir / "model.safetensors").exists(), "no copy of the base weights"
    assert ckpt.checkpoint_problem(run_dir, 2) is None
    assert len(load_file(actor_dir / "adapter_model.safetensors")) == 2 * 7 * 4

    # The export and `convert --merge-lora` give the weights one process syncs merged after step 2.
    merged_after_second = _trainer(_grpo_with_kl(tiny_model_dir, sync_merged=True), tmp_path / "merged")
    for experiences in steps[:2]:
        merged_after_second.train_step(experiences)
    expected_merged = merged_after_second.weights_for_sync()
    exported = AutoModelForCausalLM.from_pretrained(actor_dir / "huggingface").state_dict()
    assert_close_weights({name: expected_merged[name] for name in exported}, exported)
    assert main(["convert", "checkpoint", "--path", str(path), "--out", str(tmp_path / "converted"), "--merge-lora"]) == 0
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "converted").state_dict()
    assert_close_weights({name: expected_merged[name] for name in converted}, converted)

    resumed = Trainer(_grpo_with_kl(tiny_model_dir), run_dir=run_dir)
    resumed.load_checkpoint(2)
    assert resumed.global_step == 2
    _assert_close_metrics(expected[2], resumed.train_step(steps[2]))
    assert_close_weights(expected_updates[2], resumed.weights_for_sync())


def test_one_rank_lora_checkpoint_resumes_on_two_ranks_with_merged_sync(tiny_model_dir, tmp_path):
    """An adapter saved by one process loads into 2 ranks (1 -> 2, optimizer state included);
    the next step equals one process's, and the merged sync (``W + B @ A`` for engines without
    adapters) gathered from the shards equals the one process's."""
    first, second = make_experiences(seed=0), make_experiences(seed=1)
    single = _trainer(_grpo_with_kl(tiny_model_dir, sync_merged=True), tmp_path)
    single.train_step(first)
    single.save_checkpoint(export_hf=False)
    expected = single.train_step(second)
    expected_merged = single.weights_for_sync()

    sharded = _trainer(_grpo_with_kl(tiny_model_dir, sync_merged=True, data_parallel_size=2), tmp_path)
    try:
        sharded.load_checkpoint(1)
        got = sharded.train_step(second)
        merged = sharded.weights_for_sync()
    finally:
        sharded.close()
    _assert_close_metrics(expected, got)
    assert not any(".lora_" in name or "base_layer" in name for name in merged)
    assert_close_weights(expected_merged, merged)
