"""A decoder's KV cache under the names the installed transformers gives it.

transformers 5.24 renamed ``past_key_values`` to ``cache`` (keyword and output field) and
warns on the old name at every call; earlier versions know only the old one. The engine's
decoder and the trainer's shared-prompt forward pass the cache on through these two helpers.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


@functools.lru_cache(maxsize=None)
def _keyword_of(forward_type: type) -> str:
    parameters = inspect.signature(forward_type.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_keyword(model: Any) -> str:
    """The name of the cache argument of ``model``'s forward (a peft model's: its base model's)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _keyword_of(type(base))


def output_cache(output: Any) -> Any:
    """The KV cache a forward returned."""
    fields = getattr(output, "__dataclass_fields__", {})
    return output.cache if "cache" in fields else output.past_key_values
