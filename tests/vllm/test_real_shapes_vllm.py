"""vLLM serves the real-shape presets (one layer deep, full vocabulary) as the trainer computes them,
and a weight sync passes the self-check on each."""

import logging

import pytest
import torch

from trivium.models.engine import create_engine
from trivium.models.real_shapes import REAL_SHAPES, build_real_shape_model
from trivium.models.wrapper import ModelWrapper
from trivium.sync.self_check import DEFAULT_THRESHOLD, check_sync, trainer_logprobs
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.trainer import Trainer

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)


def move_first_layer(actor: torch.nn.Module, seed: int) -> None:
    """A stand-in for a training step: every matrix of the first decoder layer moves."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in actor.named_parameters():
            if ".layers.0." in name and parameter.dim() == 2:
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


@pytest.mark.parametrize("preset", sorted(REAL_SHAPES))
def test_vllm_serves_the_preset_as_the_trainer_computes_it_and_a_sync_passes(preset, tmp_path, caplog):
    model_dir = str(build_real_shape_model(tmp_path / "model", preset, layers=1, seed=0))
    engine = create_engine("vllm", model_path=model_dir, dtype="float32", seed=0, max_model_len=128, enforce_eager=True)
    trainer = Trainer(TrainerSettings(model_path=model_dir), run_dir=tmp_path / "run")
    try:
        assert engine.llm.llm_engine.vllm_config.model_config.get_vocab_size() == REAL_SHAPES[preset].vocab_size
        wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=128, enable_thinking=False)
        probes = wrapper.chat([{"role": "user", "content": "What is 2 + 3?"}], n=2, seed=0)
        assert all(p.response_length >= 1 and p.logprobs is not None for p in probes)
        same = trainer_logprobs(trainer.actor, probes, trainer.pad_token_id)
        assert max(float((s - p.logprobs).abs().max()) for s, p in zip(same, probes)) < 1e-3

        move_first_layer(trainer.actor, seed=1)
        scores = trainer_logprobs(trainer.actor, probes, trainer.pad_token_id)
        with caplog.at_level(logging.WARNING):
            assert check_sync(scores, engine, probes, version=1)["sync/max_logprob_diff"] > DEFAULT_THRESHOLD
        assert engine.update_weights(trainer.weights_for_sync(), 1) == 1
        assert check_sync(scores, engine, probes, version=1)["sync/max_logprob_diff"] < 1e-3
    finally:
        engine.close()
        trainer.close()
