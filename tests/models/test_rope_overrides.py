"""model.rope_scaling / model.rope_theta: the trainer and the hf engine load the same overridden model."""

from __future__ import annotations

import pytest
import torch

from trivium.models.engine import create_engine
from trivium.models.rope import merged_rope_parameters
from trivium.trainer.forward import trainer_logprobs
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.trainer import Trainer


def test_overrides_merge_into_the_rope_parameters():
    current = {"rope_theta": 10000.0, "rope_type": "default"}
    assert merged_rope_parameters(current, rope_scaling=None, rope_theta=5e5) == {"rope_theta": 5e5, "rope_type": "default"}
    # The older spelling "type" is read as rope_type; theta is kept.
    assert merged_rope_parameters(current, rope_scaling={"type": "linear", "factor": 4.0}, rope_theta=None) == {
        "rope_theta": 10000.0, "rope_type": "linear", "factor": 4.0,
    }
    per_layer = {"full_attention": dict(current), "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}
    merged = merged_rope_parameters(per_layer, rope_scaling=None, rope_theta=2e4)
    assert merged["full_attention"]["rope_theta"] == merged["sliding_attention"]["rope_theta"] == 2e4


def _probe():
    from trivium.core.experience import Experience

    tokens = torch.tensor([5, 9, 17, 3, 44, 12, 8, 30, 21, 7, 11, 60])
    return Experience(tokens=tokens, prompt_length=4, logprobs=torch.zeros(8), reward=0.0)


@pytest.mark.parametrize(
    ("rope_scaling", "rope_theta"), [(None, 500.0), ({"rope_type": "linear", "factor": 2.0}, None)], ids=["theta", "linear"]
)
def test_trainer_and_engine_load_the_same_overridden_rope(tiny_model_dir, tmp_path, rope_scaling, rope_theta):
    plain = Trainer(TrainerSettings(model_path=tiny_model_dir), run_dir=tmp_path / "plain")
    trainer = Trainer(
        TrainerSettings(model_path=tiny_model_dir, rope_scaling=rope_scaling, rope_theta=rope_theta), run_dir=tmp_path / "rope"
    )
    rope = trainer.actor.config.rope_parameters
    if rope_theta is not None:
        assert rope["rope_theta"] == rope_theta
        head_dim = trainer.actor.config.head_dim
        expected = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        torch.testing.assert_close(trainer.actor.model.rotary_emb.inv_freq, expected)
    else:
        assert (rope["rope_type"], rope["factor"], rope["rope_theta"]) == ("linear", 2.0, 10000.0)

    probe = _probe()
    overridden = trainer_logprobs(trainer.actor, [probe], 0)[0]
    original = trainer_logprobs(plain.actor, [probe], 0)[0]
    assert (overridden - original).abs().max() > 1e-3  # the override changes the model

    kwargs = {"rope_scaling": rope_scaling} if rope_scaling else {"rope_theta": rope_theta}
    engine = create_engine("hf", tiny_model_dir, **kwargs)
    sequence = probe.tokens.tolist()
    (engine_logprobs,) = engine.compute_logprobs([sequence], [probe.prompt_length])
    torch.testing.assert_close(engine_logprobs, overridden, atol=1e-5, rtol=0)
    # Sampling runs the engine's own decoder: its logprobs of the same tokens agree too.
    (replayed,) = engine.replay_logprobs([sequence], [probe.prompt_length])
    torch.testing.assert_close(replayed, overridden, atol=1e-4, rtol=0)


def test_an_external_engine_refuses_rope_overrides():
    from trivium.errors import UserError

    with pytest.raises(UserError, match="external engine serves its own model"):
        create_engine("external", None, rope_theta=500.0, base_url="http://127.0.0.1:9/v1")
