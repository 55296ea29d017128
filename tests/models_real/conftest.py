"""Real-shape models for the tests of this folder: each preset built once per session, one layer deep.

One layer keeps a preset's every width and its full vocabulary (the embedding is most of a
one-layer model: 150M parameters for Qwen), so loading, sampling and training take a few
seconds on a CPU. ``qwen3-0.6b`` is built through the command line, the others by the builder.
"""

from __future__ import annotations

import logging

import pytest
import torch

from trivium.cli.main import main
from trivium.models.real_shapes import build_real_shape_model
from trivium.models.wrapper import ModelWrapper
from trivium.sync.self_check import DEFAULT_THRESHOLD, check_sync
from trivium.trainer.forward import trainer_logprobs

PRESETS = ("qwen2.5-0.5b", "qwen3-0.6b", "llama3.2-1b")


@pytest.fixture(scope="session")
def real_model_dirs(tmp_path_factory) -> dict[str, str]:
    """Preset name -> its one-layer model directory, built on first use."""
    return _LazyDirs(tmp_path_factory)


class _LazyDirs(dict):
    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp_path_factory = tmp_path_factory

    def __missing__(self, preset: str) -> str:
        out = self.tmp_path_factory.mktemp(preset.replace(".", "_")) / "model"
        if preset == "qwen3-0.6b":
            assert main(["init", "model", "--preset", preset, "--layers", "1", "--out", str(out)]) == 0
        else:
            build_real_shape_model(out, preset, layers=1, seed=0)
        self[preset] = str(out)
        return self[preset]


@pytest.fixture(scope="session")
def qwen3_dir(real_model_dirs) -> str:
    return real_model_dirs["qwen3-0.6b"]


@pytest.fixture(scope="session")
def qwen3_tokenizer(qwen3_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen3_dir)


def move_first_layer(actor: torch.nn.Module, seed: int) -> None:
    """A stand-in for a training step: every matrix of the first decoder layer moves."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in actor.named_parameters():
            if ".layers.0." in name and parameter.dim() == 2:
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


def check_engine_serves_the_trainer(engine, trainer, caplog) -> None:
    """The engine's logprobs are the trainer's (to 1e-3); after the trainer's weights move, the
    sync self-check fails until the weights are synced, then passes."""
    wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=128, enable_thinking=False)
    probes = wrapper.chat([{"role": "user", "content": "What is 2 + 3?"}], n=2, seed=0)
    assert all(p.response_length >= 1 and p.logprobs is not None for p in probes)
    same = trainer_logprobs(trainer.actor, probes, trainer.pad_token_id)
    assert max(float((s - p.logprobs).abs().max()) for s, p in zip(same, probes)) < 1e-3

    move_first_layer(trainer.actor, seed=1)
    scores = trainer_logprobs(trainer.actor, probes, trainer.pad_token_id)
    with caplog.at_level(logging.WARNING):
        stale = check_sync(scores, engine, probes, version=1)
    assert stale["sync/max_logprob_diff"] > DEFAULT_THRESHOLD
    assert "WEIGHT SYNC CHECK FAILED at version 1" in caplog.text
    assert engine.update_weights(trainer.weights_for_sync(), 1) == 1 == engine.version()
    assert check_sync(scores, engine, probes, version=1)["sync/max_logprob_diff"] < 1e-3
