"""ModelWrapper: experiences from chat/generate, limits, history, concurrency."""

import asyncio
import threading

import pytest
import torch

from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def engine(qwen2_path):
    return create_engine("hf", model_path=qwen2_path, seed=0)


def make_wrapper(engine, **kwargs):
    kwargs.setdefault("max_response_tokens", 12)
    return ModelWrapper(engine, **kwargs)


def test_chat_returns_experiences_with_exact_tokens_and_logprobs(engine):
    wrapper = make_wrapper(engine, min_response_tokens=3)
    experiences = wrapper.chat(MESSAGES, n=2, temperature=1.0, seed=0)
    text = engine.tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    prompt_ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.tokens[: exp.prompt_length].tolist() == prompt_ids
        assert exp.prompt_text == text and not exp.prompt_truncated
        assert 3 <= exp.response_length <= 12
        assert exp.action_mask.all() and exp.action_mask.numel() == exp.response_length
        assert exp.model_version == 0
        recomputed = wrapper.logprobs(exp.tokens, exp.prompt_length)
        assert torch.allclose(exp.logprobs, recomputed, atol=1e-4)
        stripped = engine.tokenizer.decode(exp.response_tokens.tolist(), skip_special_tokens=True)
        assert exp.response_text == stripped


def test_generate_is_one_engine_call_for_all_prompts(engine):
    wrapper = make_wrapper(engine)
    calls_before = wrapper._batcher.calls
    results = wrapper.generate(["The quick brown fox", "Count down from ten:", "A language model"], n=2)
    assert wrapper._batcher.calls == calls_before + 1
    assert [len(group) for group in results] == [2, 2, 2]
    assert results[1][0].prompt_text == "Count down from ten:"


def test_truncation_keeps_the_last_prompt_tokens_and_flags_the_experience(engine):
    wrapper = make_wrapper(engine, max_prompt_tokens=8)
    long_messages = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 3}]
    text = engine.tokenizer.apply_chat_template(long_messages, tokenize=False, add_generation_prompt=True)
    full = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    (exp,) = wrapper.chat(long_messages)
    assert exp.prompt_truncated and exp.prompt_length == 8
    assert exp.tokens[:8].tolist() == full[-8:]


def test_without_truncation_the_response_fits_max_model_len(engine):
    wrapper = make_wrapper(
        engine, max_response_tokens=None, max_prompt_tokens=8, max_model_len=40, enable_prompt_truncation=False
    )
    (exp,) = wrapper.chat(MESSAGES, max_tokens=100, min_tokens=100)
    assert not exp.prompt_truncated and exp.prompt_length > 8
    assert exp.tokens.numel() == 40
    tight = make_wrapper(engine, max_model_len=10, enable_prompt_truncation=False)
    with pytest.raises(UserError, match="no room for a response"):
        tight.chat(MESSAGES)


def test_rollout_args_defaults_and_overrides(engine):
    wrapper = make_wrapper(engine, default_rollout_args={"temperature": 0.0, "top_p": 1.0, "top_k": None})
    greedy_a = wrapper.chat(MESSAGES)[0].tokens.tolist()
    greedy_b = wrapper.chat(MESSAGES)[0].tokens.tolist()
    assert greedy_a == greedy_b
    assert wrapper.chat(MESSAGES, max_tokens=3, min_tokens=3)[0].response_length == 3
    with pytest.raises(UserError, match="Unknown rollout argument"):
        wrapper.chat(MESSAGES, temprature=0.5)


def test_custom_chat_template_and_file_override(engine, tmp_path):
    inline = "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:"
    wrapper = make_wrapper(engine, chat_template=inline)
    assert wrapper.chat(MESSAGES, max_tokens=2)[0].prompt_text == "Q: What is 2 + 3?\nA:"
    template_file = tmp_path / "template.jinja"
    template_file.write_text("{{ messages[-1]['content'] }} =>")
    wrapper = make_wrapper(engine, chat_template=inline, chat_template_path=str(template_file))
    assert wrapper.chat(MESSAGES, max_tokens=2)[0].prompt_text == "What is 2 + 3? =>"
    with pytest.raises(UserError, match="chat_template_path"):
        make_wrapper(engine, chat_template_path=str(tmp_path / "missing.jinja"))


def test_enable_thinking_reaches_the_template(engine):
    wrapper = make_wrapper(engine, enable_thinking=False)
    assert wrapper.chat(MESSAGES, max_tokens=2)[0].prompt_text.endswith("<think>\n\n</think>\n\n")


def test_multi_turn_history_continues_the_first_turns_tokens(engine):
    wrapper = make_wrapper(engine)
    (first,) = wrapper.chat(MESSAGES)
    history = MESSAGES + [
        {"role": "assistant", "content": first.response_text},
        {"role": "user", "content": "Why?"},
    ]
    (second,) = wrapper.chat(history)
    assert second.prompt_text == first.prompt_text
    assert torch.equal(second.tokens[: first.tokens.numel()], first.tokens)
    # Four turns opened by the template (the model may sample the same token: those are its own).
    generated = torch.cat([torch.zeros(second.prompt_length, dtype=torch.bool), second.action_mask.bool()])
    im_start = engine.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert int(((second.tokens == im_start) & ~generated).sum()) == 4
    # A conversation the wrapper never sampled is rendered from its messages.
    written = MESSAGES + [{"role": "assistant", "content": "5"}, {"role": "user", "content": "Why?"}]
    (fresh,) = wrapper.chat(written)
    assert fresh.prompt_text.count("<|im_start|>") == 4


def test_history_records_and_clears(engine):
    wrapper = make_wrapper(engine, enable_history=True)
    wrapper.chat(MESSAGES, n=2)
    wrapper.generate(["hello"], n=1)
    assert len(wrapper.extract_experience_from_history(clear=False)) == 3
    assert len(wrapper.extract_experience_from_history()) == 3
    assert wrapper.extract_experience_from_history() == []


def test_model_version_follows_weight_updates(qwen2_path):
    engine = create_engine("hf", model_path=qwen2_path, seed=0)
    wrapper = make_wrapper(engine)
    weight = engine.model.model.norm.weight
    engine.update_weights({"model.norm.weight": weight * 1.1}, version=2)
    assert wrapper.model_version == 2
    assert wrapper.chat(MESSAGES)[0].model_version == 2


def test_concurrent_chats_from_threads_are_merged_and_correct(engine):
    wrapper = make_wrapper(engine, default_rollout_args={"temperature": 0.0})
    expected = wrapper.chat(MESSAGES, max_tokens=6)[0].tokens.tolist()
    calls_before = wrapper._batcher.calls
    results, errors = [None] * 16, []

    def worker(index):
        try:
            results[index] = wrapper.chat(MESSAGES, max_tokens=6)[0].tokens.tolist()
        except Exception as error:  # noqa: BLE001 - surfaced by the assert below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert all(r == expected for r in results)
    assert wrapper._batcher.calls - calls_before < 16  # requests shared engine calls


def test_async_calls_run_concurrently_and_return_experiences(engine):
    wrapper = make_wrapper(engine)

    async def main():
        return await asyncio.gather(
            wrapper.chat_async(MESSAGES, n=2, max_tokens=4),
            wrapper.generate_async(["hi", "the"], max_tokens=4, top_p=0.5, repetition_penalty=1.2),
            wrapper.chat_async(MESSAGES, max_tokens=4, seed=1),
        )

    chat, generated, seeded = asyncio.run(main())
    assert len(chat) == 2 and [len(g) for g in generated] == [1, 1] and len(seeded) == 1
    assert all(e.response_length <= 4 for e in chat + seeded)


def test_invalid_limits_are_user_errors(engine):
    with pytest.raises(UserError, match="min_response_tokens"):
        ModelWrapper(engine, max_response_tokens=4, min_response_tokens=5)
    with pytest.raises(UserError, match="max_response_tokens or model.max_model_len"):
        ModelWrapper(engine)


def test_a_conversation_keeps_the_thinking_setting_it_started_with(engine):
    wrapper = make_wrapper(engine)
    (first,) = wrapper.chat(MESSAGES, max_tokens=2, enable_thinking=False)
    assert first.prompt_text.endswith("<think>\n\n</think>\n\n")
    history = MESSAGES + [{"role": "assistant", "content": first.response_text}, {"role": "user", "content": "Why?"}]
    (second,) = wrapper.chat(history, max_tokens=2)  # continued: rendered as it started
    assert torch.equal(second.tokens[: first.tokens.numel()], first.tokens)
    assert engine.tokenizer.decode(second.tokens).count("<think>\n\n</think>") == 2
    (fresh,) = wrapper.chat(MESSAGES, max_tokens=2)
    assert "<think>" not in fresh.prompt_text  # the wrapper's own setting is unchanged


def test_a_workflow_view_renders_with_its_taskset_thinking_setting(engine):
    wrapper = make_wrapper(engine)
    (thinking_off,) = wrapper.for_workflow(enable_thinking=False).chat(MESSAGES, max_tokens=2)
    assert thinking_off.prompt_text.endswith("<think>\n\n</think>\n\n")
    assert "<think>" not in wrapper.for_workflow().chat(MESSAGES, max_tokens=2)[0].prompt_text


def test_a_reply_prefix_opens_every_reply_as_prompt_tokens(engine):
    view = make_wrapper(engine).for_workflow(reply_prefix="Sure:")
    # Greedy: a sampled special token inside the reply would make its text differ from its tokens.
    (first,) = view.chat(MESSAGES, max_tokens=2, temperature=0.0)
    assert first.prompt_text.endswith("<|im_start|>assistant\nSure:")
    assert engine.tokenizer.decode(first.tokens[: first.prompt_length]).endswith("Sure:")
    history = MESSAGES + [{"role": "assistant", "content": first.response_text}, {"role": "user", "content": "Why?"}]
    (second,) = view.chat(history, max_tokens=2)
    # Continued token-exactly; the template saw the first reply whole, and the second starts with the prefix too.
    assert torch.equal(second.tokens[: first.tokens.numel()], first.tokens)
    text = engine.tokenizer.decode(second.tokens)
    assert text.count("assistant\nSure:") == 2 and f"Sure:{first.response_text}<|im_end|>" in text
    # Right before the second reply's sampled (trained) tokens: the prefix's ids, not trained.
    prefix_ids = engine.tokenizer("Sure:", add_special_tokens=False)["input_ids"]
    mask = second.action_mask.tolist()
    sampled = len(mask) - max(i for i, trained in enumerate(mask) if not trained) - 1
    before = len(second.tokens) - sampled
    assert second.tokens[before - len(prefix_ids) : before].tolist() == prefix_ids
    assert mask[len(mask) - sampled - len(prefix_ids) : len(mask) - sampled] == [False] * len(prefix_ids)
