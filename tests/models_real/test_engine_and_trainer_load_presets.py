"""The hf engine and the trainer load every real-shape preset, and the weight-sync self-check agrees on it."""

import logging

import pytest
import torch

from trivium.models.engine import create_engine
from trivium.models.real_shapes import REAL_SHAPES
from trivium.models.wrapper import ModelWrapper
from trivium.sync.self_check import DEFAULT_THRESHOLD, check_sync, trainer_logprobs
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import PRESETS


def move_first_layer(actor: torch.nn.Module, seed: int) -> None:
    """A stand-in for a training step: every matrix of the first decoder layer moves."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in actor.named_parameters():
            if ".layers.0." in name and parameter.dim() == 2:
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


@pytest.mark.parametrize("preset", PRESETS)
def test_engine_and_trainer_load_the_preset_and_a_sync_passes_the_self_check(real_model_dirs, preset, tmp_path, caplog):
    model_dir = real_model_dirs[preset]
    engine = create_engine("hf", model_path=model_dir, seed=0)
    trainer = Trainer(TrainerSettings(model_path=model_dir), run_dir=tmp_path)
    try:
        vocab_size = REAL_SHAPES[preset].vocab_size
        assert engine.model.config.vocab_size == trainer.actor.config.vocab_size == vocab_size
        assert trainer.actor.get_input_embeddings().weight.shape[0] == vocab_size
        wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=128, enable_thinking=False)
        probes = wrapper.chat([{"role": "user", "content": "What is 2 + 3?"}], n=2, seed=0)
        assert all(p.response_length >= 1 and p.logprobs is not None for p in probes)

        # The probes' engine logprobs are what the trainer computes from the same file.
        same = trainer_logprobs(trainer.actor, probes, trainer.pad_token_id)
        assert max(float((s - p.logprobs).abs().max()) for s, p in zip(same, probes)) < 1e-3

        move_first_layer(trainer.actor, seed=1)
        scores = trainer_logprobs(trainer.actor, probes, trainer.pad_token_id)
        with caplog.at_level(logging.WARNING):
            stale = check_sync(scores, engine, probes, version=1)
        assert stale["sync/max_logprob_diff"] > DEFAULT_THRESHOLD
        assert "WEIGHT SYNC CHECK FAILED at version 1" in caplog.text

        assert engine.update_weights(trainer.weights_for_sync(), 1) == 1 == engine.version()
        synced = check_sync(scores, engine, probes, version=1)
        assert synced["sync/max_logprob_diff"] < 1e-3
    finally:
        engine.close()
        trainer.close()
