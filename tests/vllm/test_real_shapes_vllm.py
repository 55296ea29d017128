"""vLLM serves the real-shape presets (one layer deep, full vocabulary) as the trainer computes them,
and a weight sync passes the self-check on each."""

import pytest

from tests.models_real.conftest import check_engine_serves_the_trainer
from trivium.models.engine import create_engine
from trivium.models.real_shapes import REAL_SHAPES, build_real_shape_model
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.trainer import Trainer

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)


@pytest.mark.parametrize("preset", sorted(REAL_SHAPES))
def test_vllm_serves_the_preset_as_the_trainer_computes_it_and_a_sync_passes(preset, tmp_path, caplog):
    model_dir = str(build_real_shape_model(tmp_path / "model", preset, layers=1, seed=0))
    engine = create_engine("vllm", model_path=model_dir, dtype="float32", seed=0, max_model_len=128, enforce_eager=True)
    trainer = Trainer(TrainerSettings(model_path=model_dir), run_dir=tmp_path / "run")
    try:
        assert engine.llm.llm_engine.vllm_config.model_config.get_vocab_size() == REAL_SHAPES[preset].vocab_size
        check_engine_serves_the_trainer(engine, trainer, caplog)
    finally:
        engine.close()
        trainer.close()
