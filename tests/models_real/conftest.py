"""Real-shape models for the tests of this folder: each preset built once per session, one layer deep.

One layer keeps a preset's every width and its full vocabulary (the embedding is most of a
one-layer model: 150M parameters for Qwen), so loading, sampling and training take a few
seconds on a CPU. ``qwen3-0.6b`` is built through the command line, the others by the builder.
"""

from __future__ import annotations

import pytest

from trivium.cli.main import main
from trivium.models.real_shapes import build_real_shape_model

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
