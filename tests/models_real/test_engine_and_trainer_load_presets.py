"""The hf engine and the trainer load every real-shape preset, and the weight-sync self-check agrees on it."""

import pytest

from trivium.models.engine import create_engine
from trivium.models.real_shapes import REAL_SHAPES
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import PRESETS, check_engine_serves_the_trainer


@pytest.mark.parametrize("preset", PRESETS)
def test_engine_and_trainer_load_the_preset_and_a_sync_passes_the_self_check(real_model_dirs, preset, tmp_path, caplog):
    model_dir = real_model_dirs[preset]
    engine = create_engine("hf", model_path=model_dir, seed=0)
    trainer = Trainer(TrainerSettings(model_path=model_dir), run_dir=tmp_path)
    try:
        vocab_size = REAL_SHAPES[preset].vocab_size
        assert engine.model.config.vocab_size == trainer.actor.config.vocab_size == vocab_size
        assert trainer.actor.get_input_embeddings().weight.shape[0] == vocab_size
        check_engine_serves_the_trainer(engine, trainer, caplog)
    finally:
        engine.close()
        trainer.close()
