"""Syncing a LoRA actor: only the adapter travels, and the engine then scores like the trainer."""

from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import make_experiences
from trivium.models.engine import create_engine, takes_lora_adapters
from trivium.models.lora_delta import delta_from_adapter_dir, update_bytes
from trivium.runtime.workers import load_actor_weights
from trivium.sync.checkpoint_transport import CheckpointTransport
from trivium.sync.self_check import engine_logprobs, max_logprob_gap
from trivium.trainer.forward import trainer_logprobs
from trivium.trainer.settings import LoRASettings, LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer


def lora_trainer(model_dir, run_dir, **lora) -> Trainer:
    settings = TrainerSettings(
        model_path=model_dir, lr=1e-2, micro_batch_size=4, loss=LossSettings(policy_loss_fn="ppo"),
        lora=LoRASettings(rank=4, alpha=8, **lora),
    )
    return Trainer(settings, run_dir=run_dir)


def move_adapter(trainer: Trainer, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in trainer.actor.named_parameters():
            if ".lora_" in name:
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))


def model_bytes(model_dir: str) -> int:
    return sum(path.stat().st_size for path in Path(model_dir).glob("*.safetensors"))


def test_adapter_sync_matches_trainer_logprobs_and_is_small(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    probes = make_experiences(seed=3)
    for version, seed in ((1, 0), (2, 1), (3, 2)):  # merged from the base each time: no drift
        move_adapter(trainer, seed)
        update = trainer.weights_for_sync()
        assert all(".lora_" in name for name in update)
        scores = trainer_logprobs(trainer.actor, probes)
        assert max_logprob_gap(scores, engine_logprobs(engine, probes)) > 0.05, "the adapter changes the policy"
        assert engine.update_weights(update, version) == version == engine.version()
        assert max_logprob_gap(scores, engine_logprobs(engine, probes)) < 1e-4
    # Rank 4 on a ~0.8M-parameter model: the adapter is a few percent of the weights.
    assert update_bytes(update) < 0.1 * model_bytes(tiny_model_dir)


def test_merged_sync_for_engines_without_adapters(tiny_model_dir, tmp_path):
    assert takes_lora_adapters("hf") and takes_lora_adapters("vllm") and not takes_lora_adapters("external")
    trainer = lora_trainer(tiny_model_dir, tmp_path, sync_merged=True)
    move_adapter(trainer, 0)
    update = trainer.weights_for_sync()
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    assert set(update) == set(engine.model.state_dict()), "whole weights under the base model's names"
    engine.update_weights(update, 1)
    probes = make_experiences(seed=3)
    assert max_logprob_gap(trainer_logprobs(trainer.actor, probes), engine_logprobs(engine, probes)) < 1e-4


def test_a_saved_adapter_loads_into_engines_as_the_trainer_syncs_it(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    move_adapter(trainer, 0)
    trainer.actor.save_pretrained(tmp_path / "actor")
    synced = trainer.weights_for_sync()
    from_disk = delta_from_adapter_dir(tmp_path / "actor")
    assert set(from_disk) == set(synced)
    for name, tensor in synced.items():
        assert torch.allclose(from_disk[name], tensor, atol=1e-6), name
    assert set(load_actor_weights(tmp_path / "actor")) == set(synced)
    # For an engine that takes whole weights, the explorer merges the adapter into its base.
    merged = load_actor_weights(tmp_path / "actor", merge_adapter=True)
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    engine.update_weights(merged, 1)
    probes = make_experiences(seed=4)
    assert max_logprob_gap(trainer_logprobs(trainer.actor, probes), engine_logprobs(engine, probes)) < 1e-4


def test_self_check_scores_without_dropout(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path, dropout=0.5)
    move_adapter(trainer, 0)
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    engine.update_weights(trainer.weights_for_sync(), 1)
    probes = make_experiences(seed=3)
    assert max_logprob_gap(trainer_logprobs(trainer.actor, probes), engine_logprobs(engine, probes)) < 1e-4
    assert trainer.actor.training, "the trainer's mode is restored"


@pytest.mark.parametrize("bucket_split", [1, 7])
def test_adapter_halves_in_separate_buckets_are_merged_when_both_arrived(tiny_model_dir, tmp_path, bucket_split):
    """A bucketed broadcast may deliver a layer's A and B in different calls."""
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    move_adapter(trainer, 0)
    update = trainer.weights_for_sync()
    names = list(update)
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    for start in range(0, len(names), bucket_split):
        engine.update_weights({name: update[name] for name in names[start : start + bucket_split]}, 1)
    probes = make_experiences(seed=3)
    assert max_logprob_gap(trainer_logprobs(trainer.actor, probes), engine_logprobs(engine, probes)) < 1e-4


def test_checkpoint_transport_carries_the_adapter_alone(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    move_adapter(trainer, 0)
    staged = CheckpointTransport(run_dir=tmp_path).sender().stage(trainer, 1, copy=True)
    assert Path(staged.path).stat().st_size < 0.1 * model_bytes(tiny_model_dir)
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    assert engine.update_weights(staged.load(), staged.version) == 1
    probes = make_experiences(seed=3)
    assert max_logprob_gap(trainer_logprobs(trainer.actor, probes), engine_logprobs(engine, probes)) < 1e-4
