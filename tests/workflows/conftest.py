"""A scripted stand-in for the rollout model: the workflows are what these tests check."""

from __future__ import annotations

import asyncio

import pytest
import torch

from trivium.core.experience import Experience


class ScriptedModel:
    """Answers every chat call with the next ``n`` scripted replies, cycling through the script.

    Token ids are character codes, so prompt_length and tokens are real and checkable.
    Records every call for assertions.
    """

    def __init__(self, replies: list[str], model_version: int = 3):
        self.replies = replies
        self.model_version = model_version
        self.calls: list[dict] = []
        self._next = 0

    def _experience(self, prompt_text: str, response_text: str) -> Experience:
        prompt_ids = [ord(char) % 256 for char in prompt_text]
        response_ids = [ord(char) % 256 for char in response_text]
        return Experience(
            tokens=torch.tensor(prompt_ids + response_ids, dtype=torch.long),
            prompt_length=len(prompt_ids),
            logprobs=torch.full((len(response_ids),), -0.5),
            prompt_text=prompt_text,
            response_text=response_text,
            model_version=self.model_version,
        )

    def chat(self, messages: list[dict], n: int = 1, **rollout_args) -> list[Experience]:
        self.calls.append({"messages": messages, "n": n, **rollout_args})
        prompt_text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        experiences = []
        for _ in range(n):
            experiences.append(self._experience(prompt_text, self.replies[self._next % len(self.replies)]))
            self._next += 1
        return experiences

    def generate(self, prompts: list[str], n: int = 1, **rollout_args) -> list[list[Experience]]:
        return [self.chat([{"role": "user", "content": prompt}], n=n, **rollout_args) for prompt in prompts]


class AsyncScriptedModel(ScriptedModel):
    """Also offers ``chat_async``, as the real wrapper does for the asynchronous runner."""

    def __init__(self, replies: list[str]):
        super().__init__(replies)
        self.async_calls = 0

    async def chat_async(self, messages: list[dict], n: int = 1, **rollout_args) -> list[Experience]:
        self.async_calls += 1
        await asyncio.sleep(0)
        return self.chat(messages, n=n, **rollout_args)


@pytest.fixture
def scripted_model():
    return ScriptedModel


@pytest.fixture
def async_scripted_model():
    return AsyncScriptedModel
