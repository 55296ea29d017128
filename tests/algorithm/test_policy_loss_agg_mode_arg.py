"""policy_loss_fn_args.loss_agg_mode gives way to algorithm.loss_agg_mode, as in Trinity-RFT.

Each case resolves a config, builds the trainer's loss settings from it and calls the policy
loss the way the trainer does (``loss_agg_mode=...``, then the loss's arguments), on one small
batch whose aggregations differ:

    per-token loss -A * r with r = 1:   row 0: -1 -2 -3    row 1: -4 (two padded tokens)
    token-mean           (-1 - 2 - 3 - 4) / 4 = -2.5
    seq-mean-token-sum   (-6 + -4) / 2        = -5
    seq-mean-token-mean  (-2 + -4) / 2        = -3
"""

from __future__ import annotations

import pytest
import torch

from trivium.algorithm.policy_losses import POLICY_LOSS_FNS
from trivium.config import ConfigError, load_config_from_dict, resolve_with_notes
from trivium.runtime.settings import build_run_settings

KEY = "algorithm.policy_loss_fn_args.loss_agg_mode"
ADVANTAGES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
LOGPROBS = torch.full((2, 3), -1.0)


def resolved_loss(tmp_path, **algorithm):
    data = {
        "mode": "colocate",
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": "/models/m", "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, **algorithm},
        "buffer": {"batch_size": 2, "total_steps": 3},
    }
    resolved, notes = resolve_with_notes(load_config_from_dict(data))
    return build_run_settings(resolved).trainer.loss, [note for note in notes if note.key == KEY]


def policy_loss(loss) -> float:
    fn = POLICY_LOSS_FNS.get(loss.policy_loss_fn)
    value, _ = fn(
        logprobs=LOGPROBS,
        old_logprobs=LOGPROBS.clone(),
        advantages=ADVANTAGES,
        response_mask=MASK,
        loss_agg_mode=loss.loss_agg_mode,
        **loss.policy_loss_fn_args,
    )
    return float(value)


def test_given_alone_it_gives_way_to_the_default_token_mean_and_says_so(tmp_path):
    loss, notes = resolved_loss(tmp_path, policy_loss_fn_args={"loss_agg_mode": "seq-mean-token-sum"})
    assert loss.loss_agg_mode == "token-mean"
    assert "loss_agg_mode" not in loss.policy_loss_fn_args
    assert policy_loss(loss) == pytest.approx(-2.5)
    assert len(notes) == 1 and "set algorithm.loss_agg_mode: seq-mean-token-sum" in notes[0].message


def test_when_both_places_disagree_algorithm_loss_agg_mode_wins(tmp_path):
    loss, notes = resolved_loss(
        tmp_path, loss_agg_mode="seq-mean-token-sum", policy_loss_fn_args={"loss_agg_mode": "token-mean"}
    )
    assert loss.loss_agg_mode == "seq-mean-token-sum"
    assert policy_loss(loss) == pytest.approx(-5.0)
    assert (
        len(notes) == 1
        and "'token-mean' gives way to algorithm.loss_agg_mode 'seq-mean-token-sum'" in notes[0].message
    )


def test_when_both_places_agree_the_mode_applies_without_a_note(tmp_path):
    loss, notes = resolved_loss(
        tmp_path,
        loss_agg_mode="seq-mean-token-mean",
        policy_loss_fn_args={"loss_agg_mode": "seq-mean-token-mean", "clip_range_high": 0.28},
    )
    assert loss.policy_loss_fn_args == {"clip_range_high": 0.28}
    assert policy_loss(loss) == pytest.approx(-3.0)
    assert notes == []


def test_rec_given_the_argument_follows_algorithm_loss_agg_mode(tmp_path):
    # rec's per-token loss is -A * log pi = A here: token mean 2.5, seq-mean-token-sum (6 + 4) / 2 = 5.
    rec = {"algorithm_type": "rec", "loss_agg_mode": "seq-mean-token-sum"}
    own_rule, _ = resolved_loss(tmp_path, **rec)
    following, _ = resolved_loss(tmp_path, **rec, policy_loss_fn_args={"loss_agg_mode": "seq-mean-token-sum"})
    assert policy_loss(own_rule) == pytest.approx(2.5)
    assert following.policy_loss_fn_args["follow_loss_agg_mode"] is True
    assert policy_loss(following) == pytest.approx(5.0)


def test_an_invalid_value_names_the_key_and_the_choices(tmp_path):
    with pytest.raises(ConfigError, match=rf"{KEY}: invalid value 'mean'; choose one of: token-mean"):
        resolved_loss(tmp_path, policy_loss_fn_args={"loss_agg_mode": "mean"})
