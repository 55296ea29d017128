"""Calls on Ray actors, and the engine interface over an engine actor.

``call_actor`` is a blocking call; ``actor_errors`` turns Ray's wrappers back into what
happened: a raised error comes back as itself, and an actor whose process died becomes
``ComponentDied`` naming it, so the run stops with a clear message. ``RemoteEngine`` is the
explorer's view of an ``EngineHost`` (``ray_actors.py``). Ray is imported on the first call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trivium.errors import ComponentDied
from trivium.models.engine.base import InferenceEngine


@contextmanager
def actor_errors(name: str) -> Iterator[None]:
    """Translate Ray's wrappers: a dead actor names itself; a raised error comes back as itself."""
    import ray.exceptions

    try:
        yield
    except ray.exceptions.RayActorError as error:
        raise ComponentDied(
            f"the {name} actor died ({type(error).__name__}): its process was killed or crashed; "
            f"see the run's log/ folder. Resume with continue_from_checkpoint: true."
        ) from None
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise


def call_actor(handle: Any, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
    import ray

    with actor_errors(name):
        return ray.get(getattr(handle, method).remote(*args, **kwargs))


class RemoteEngine(InferenceEngine):
    """The explorer's view of an ``EngineHost``: the engine interface, over Ray."""

    def __init__(self, handle: Any, *, tokenizer_path: str | None, name: str):
        from transformers import AutoTokenizer

        self.handle = handle
        self.name = name
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path) if tokenizer_path else None
        self.vocab_size = self._call("vocab_size")
        self.replays_samples = self._call("replays_samples")

    def _call(self, method: str, *args: Any) -> Any:
        return call_actor(self.handle, self.name, method, *args)

    def generate(self, prompts, params):
        return self._call("generate", prompts, params)

    def compute_logprobs(self, sequences, prompt_lengths):
        return self._call("compute_logprobs", sequences, prompt_lengths)

    def replay_logprobs(self, sequences, prompt_lengths):
        return self._call("replay_logprobs", sequences, prompt_lengths)

    def update_weights(self, state_dict, version: int) -> int:
        return self._call("update_weights", state_dict, version)

    def version(self) -> int:
        return self._call("version")
