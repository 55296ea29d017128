"""algorithm.bypass_old_logprobs: the rollout engine's logprobs are the policy loss's old logprobs.

The key is the reference's spelling of trainer.old_logprobs_source: true is 'engine', false a
source where the trainer computes them; the two must not disagree, and 'engine' is refused
where no engine logprobs can exist.
"""

from __future__ import annotations

import pytest
import torch

from trivium.config import ConfigError, load_config_from_dict, resolve, validate
from trivium.core.batch import ExperienceBatch
from trivium.errors import UserError
from trivium.runtime.settings import build_run_settings
from trivium.trainer.forward import response_logprobs
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences


def config(tmp_path, algorithm=None, trainer=None, **top):
    data = {
        "mode": "colocate",
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": "/models/m", "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, **(algorithm or {})},
        "buffer": {"batch_size": 2, "total_steps": 3},
        "trainer": trainer or {},
        **top,
    }
    return load_config_from_dict(data)


def old_logprobs_source(tmp_path, **algorithm) -> str:
    return build_run_settings(resolve(config(tmp_path, algorithm))).trainer.old_logprobs_source


def test_true_takes_the_engine_logprobs_and_false_or_unset_lets_the_trainer_compute_them(tmp_path):
    assert old_logprobs_source(tmp_path, bypass_old_logprobs=True) == "engine"
    assert old_logprobs_source(tmp_path, bypass_old_logprobs=False) == "auto"
    assert old_logprobs_source(tmp_path) == "auto"


@pytest.mark.parametrize("bypass, source", [(True, "recompute"), (True, "decoupled"), (False, "engine")])
def test_a_disagreeing_old_logprobs_source_is_an_error_naming_both_keys(tmp_path, bypass, source):
    loaded = config(tmp_path, {"bypass_old_logprobs": bypass}, {"old_logprobs_source": source})
    with pytest.raises(
        ConfigError, match=rf"algorithm.bypass_old_logprobs: {str(bypass).lower()} .*'{source}'"
    ):
        resolve(loaded)


def test_an_algorithm_trained_on_a_dataset_refuses_it(tmp_path):
    loaded = config(
        tmp_path,
        {"algorithm_type": "sft", "bypass_old_logprobs": True},
        mode="train",
        buffer={
            "batch_size": 2,
            "total_steps": 3,
            "trainer_input": {"experience_buffer": {"storage_type": "file", "path": str(tmp_path)}},
        },
    )
    with pytest.raises(
        ConfigError, match="algorithm.bypass_old_logprobs: takes the old logprobs from the rollout"
    ):
        validate(resolve(loaded))


def trainer_for(tmp_path, model_dir, source: str) -> Trainer:
    settings = TrainerSettings(
        model_path=model_dir,
        lr=1e-3,
        micro_batch_size=8,
        old_logprobs_source=source,
        loss=LossSettings(policy_loss_fn="ppo", policy_loss_fn_args={"clip_range": 0.2}),
    )
    return Trainer(settings, run_dir=tmp_path / source)


def with_engine_logprobs_below_the_trainers(trainer: Trainer, shift: float):
    """Experiences whose engine logprobs are the trainer's own minus ``shift`` on every token."""
    experiences = make_experiences()
    batch = ExperienceBatch.from_experiences(experiences)
    with torch.no_grad():
        current, _ = response_logprobs(trainer.actor, batch)
    for row, experience in enumerate(experiences):
        experience.logprobs = current[row, : experience.response_length] - shift
    return experiences


def test_the_loss_sees_the_engine_logprobs_as_old_logprobs(tmp_path, tiny_model_dir):
    # log r = log pi - log pi_old = +0.25 on every token with the engine's; 0 with the trainer's own.
    # ppo_kl is the token mean of -log r.
    metrics = {}
    for source in ("engine", "auto"):
        trainer = trainer_for(tmp_path, tiny_model_dir, source)
        metrics[source] = trainer.train_step(with_engine_logprobs_below_the_trainers(trainer, 0.25))
    assert metrics["engine"]["actor/ppo_kl"] == pytest.approx(-0.25, abs=1e-4)
    assert metrics["auto"]["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    # ratio e^0.25 = 1.28 lies beyond the clip range 1.2: the positive-advantage tokens are clipped.
    assert metrics["engine"]["actor/pg_clipfrac"] > 0 == metrics["auto"]["actor/pg_clipfrac"]


def test_an_experience_without_engine_logprobs_stops_the_step_naming_the_key(tmp_path, tiny_model_dir):
    trainer = trainer_for(tmp_path, tiny_model_dir, "engine")
    experiences = make_experiences()
    experiences[3].logprobs = None
    with pytest.raises(
        UserError, match=r"1 of the 8 experiences .* Set algorithm.bypass_old_logprobs: false"
    ):
        trainer.train_step(experiences)


def test_m2po_takes_the_rollout_logprobs_unless_told_otherwise_which_it_refuses(tmp_path):
    # m2po's mask compares the sampling policy with the current one: recomputed old logprobs
    # would make every ratio 1 and mask nothing.
    assert old_logprobs_source(tmp_path, algorithm_type="m2po") == "engine"
    for algorithm, trainer in (({"bypass_old_logprobs": False}, {}), ({}, {"old_logprobs_source": "recompute"})):
        loaded = config(tmp_path, {"algorithm_type": "m2po", **algorithm}, trainer)
        with pytest.raises(ConfigError, match="m2po compares the policy that sampled each token"):
            validate(resolve(loaded))
