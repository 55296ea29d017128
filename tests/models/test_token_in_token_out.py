"""Multi-turn chats are token-in, token-out: one exact sequence per episode, masks, drift, truncation."""

import logging

import pytest
import torch

from trivium.core.batch import ExperienceBatch
from trivium.core.episode_turns import latest_reply
from trivium.models.engine import create_engine
from trivium.models.tool_calls import tool_call_parser_named
from trivium.models.wrapper import ModelWrapper
from trivium.trainer.forward import response_logprobs
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

# Marks the newest user message: every earlier rendering changes once a message is added.
LATEST_MARKING_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' and loop.last %}{{- '<|im_start|>user (latest)\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' }}{%- endif %}"
    "{{- message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return create_engine("hf", model_path=tiny_model_dir, seed=0)


def play(wrapper, turns: int, *, observation=lambda k: f"observation {k}"):
    """Send each reply back with a new user message, as a multi-turn workflow does."""
    messages = [{"role": "user", "content": "Find the goal."}]
    experiences = []
    for turn in range(turns):
        (experience,) = wrapper.chat(messages, seed=turn)
        experiences.append(experience)
        messages = messages + [
            {"role": "assistant", "content": latest_reply(experience)},
            {"role": "user", "content": observation(turn)},
        ]
    return experiences, messages


def test_four_turn_episode_logprobs_match_the_trainer_exactly(engine, tiny_model_dir, tmp_path):
    wrapper = ModelWrapper(engine, max_response_tokens=5, max_model_len=256, enable_history=True)
    experiences, _ = play(wrapper, 4)
    final = experiences[-1]
    # Each turn extends the previous turn's exact sequence: nothing was re-encoded.
    for shorter, longer in zip(experiences, experiences[1:]):
        assert torch.equal(longer.tokens[: shorter.tokens.numel()], shorter.tokens)
        assert longer.prompt_length == shorter.prompt_length
    assert final.info["model_turns"] == 4 and final.metrics["template_drift"] == 0.0
    # Four runs of model tokens (5 each), separated by three runs of environment tokens.
    mask = final.action_mask.int().tolist()
    runs = [mask[0]] + [b for a, b in zip(mask, mask[1:]) if a != b]
    assert runs == [1, 0, 1, 0, 1, 0, 1] and sum(mask) == 20
    assert (final.logprobs[~final.action_mask] == 0).all()
    # The trainer's recomputed logprobs equal the engine's on every model token.
    trainer = Trainer(TrainerSettings(model_path=tiny_model_dir, loss=LossSettings()), run_dir=tmp_path)
    batch = ExperienceBatch.from_experiences([final], trainer.pad_token_id)
    with torch.no_grad():
        recomputed, _ = response_logprobs(trainer.actor, batch)
    model_tokens = final.action_mask
    assert torch.allclose(
        recomputed[0, : final.response_length][model_tokens], final.logprobs[model_tokens], atol=1e-4
    )
    # History keeps the episode once, whole.
    (recorded,) = wrapper.extract_experience_from_history()
    assert torch.equal(recorded.tokens, final.tokens)


def test_environment_tokens_are_the_templates_own_ids(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=256)
    experiences, messages = play(wrapper, 2)
    first, second = experiences
    tokenizer = engine.tokenizer
    between = second.tokens[first.tokens.numel() : second.tokens.numel() - 4].tolist()
    # After a reply cut by the length limit the template closes the turn, then the user's turn and
    # the assistant header follow: exactly the template's text for them.
    text = tokenizer.decode(between, skip_special_tokens=False)
    assert text == "<|im_end|>\n<|im_start|>user\nobservation 0<|im_end|>\n<|im_start|>assistant\n"
    assert not second.action_mask[first.response_length : second.response_length - 4].any()


def test_a_template_that_rewrites_earlier_turns_is_detected_and_reported(engine, caplog):
    wrapper = ModelWrapper(
        engine, chat_template=LATEST_MARKING_TEMPLATE, max_response_tokens=4, max_model_len=256
    )
    with caplog.at_level(logging.WARNING, logger="trivium.models.wrapper"):
        experiences, _ = play(wrapper, 4)
    warnings = [r.getMessage() for r in caplog.records if "not prefix-preserving" in r.getMessage()]
    assert len(warnings) == 1, "warn once"
    assert "rendering turn 2 does not start with turn 1" in warnings[0] and "(latest)" in warnings[0]
    assert wrapper.template_drift_events == 3
    assert experiences[-1].metrics["template_drift"] == 3.0
    # The episode still continues from what the model saw (the first prompt keeps its marker).
    for shorter, longer in zip(experiences, experiences[1:]):
        assert torch.equal(longer.tokens[: shorter.tokens.numel()], shorter.tokens)
    assert "user (latest)\nFind the goal." in engine.tokenizer.decode(experiences[-1].tokens)


def test_episode_reaching_max_model_len_ends_flagged_and_is_masked_unless_kept(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=8, max_model_len=40)
    experiences, _ = play(wrapper, 4, observation=lambda k: "a long observation of the frozen lake " * 2)
    last = experiences[-1]
    assert last.episode_truncated and last.info["finish_reason"] == "length"
    assert last.tokens.numel() <= 40
    masked = ExperienceBatch.from_experiences([last])
    kept = ExperienceBatch.from_experiences([last], train_truncated_episodes=True)
    assert masked.response_mask.sum() == 0
    assert kept.response_mask.sum() == last.action_mask.sum() > 0


def test_independent_samples_of_one_prompt_are_separate_conversations(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=256, enable_history=True)
    messages = [{"role": "user", "content": "Find the goal."}]
    first, second = wrapper.chat(messages, n=2, seed=3)
    follow_up = messages + [
        {"role": "assistant", "content": second.response_text},
        {"role": "user", "content": "and?"},
    ]
    (continued,) = wrapper.chat(follow_up, seed=4)
    assert torch.equal(continued.tokens[: second.tokens.numel()], second.tokens)
    recorded = wrapper.extract_experience_from_history()
    # The first branch stays; the second was replaced by its continuation.
    assert sorted(e.response_length for e in recorded) == sorted(
        [first.response_length, continued.response_length]
    )


def test_hermes_parser_turns_tool_call_blocks_into_openai_tool_calls():
    parser = tool_call_parser_named("hermes")
    content, calls = parser.parse(
        'Let me look. <tool_call>{"name": "move", "arguments": {"direction": "down"}}</tool_call>'
    )
    assert content == "Let me look."
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == "move"
    assert calls[0]["function"]["arguments"] == '{"direction": "down"}'
    broken = "<tool_call>{not json}</tool_call>"
    assert parser.parse(broken) == (broken, [])
