"""A function, parser or strategy the config names ``none`` reaches the typed settings as None."""

from __future__ import annotations

from trivium.config import load_config_from_dict, resolve_with_notes
from trivium.config.none_name import named, text_or_none
from trivium.runtime.settings import build_run_settings


def test_named_turns_every_spelling_of_nothing_into_none():
    assert [named(value) for value in (None, "", "none", "k3")] == [None, None, None, "k3"]
    assert [text_or_none(value) for value in ("null", "None", "{{ messages }}")] == [
        None,
        None,
        "{{ messages }}",
    ]


def test_none_in_the_config_is_none_in_the_settings_and_stays_none_in_the_resolved_config(tmp_path):
    data = {
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path),
        "model": {
            "model_path": "/models/m",
            "max_prompt_tokens": 16,
            "max_response_tokens": 8,
            "custom_chat_template": "none",
        },
        "cluster": {"gpu_per_node": 0},
        "algorithm": {
            "algorithm_type": "ppo",
            "repeat_times": 2,
            "kl_loss_fn": "none",
            "kl_penalty_fn": "none",
            "entropy_loss_fn": "none",
        },
        "trainer": {"trainer_strategy": "none"},
        "explorer": {"rollout_model": {"tool_call_parser": "none", "reasoning_parser": "none"}},
        "buffer": {"batch_size": 2, "total_steps": 3},
    }
    resolved, _ = resolve_with_notes(load_config_from_dict(data))
    written = (resolved.algorithm.kl_loss_fn, resolved.trainer.trainer_strategy)
    assert written == ("none", "none")  # the resolved config keeps what the user wrote
    run = build_run_settings(resolved)
    loss = run.trainer.loss
    assert (loss.kl_loss_fn, loss.kl_penalty_fn, loss.entropy_loss_fn, run.trainer.strategy) == (None,) * 4
    assert loss.advantage_fn == "ppo" and run.trainer.use_critic and not loss.needs_reference
    wrapper = run.explorer.wrapper
    assert (wrapper.tool_call_parser, wrapper.reasoning_parser, wrapper.chat_template) == (None, None, None)
