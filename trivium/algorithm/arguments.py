"""Checking user-given ``*_fn_args`` against the keyword arguments a function really takes.

Algorithm functions accept ``**_ignored`` so the trainer can hand every function the same
batch tensors; the price is that a misspelt argument would be silently dropped. The config
resolver calls ``check_fn_args`` once, at set-up, to turn such a typo into a clear error.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from trivium.errors import UserError

# Inputs the trainer fills from the batch; they are not user-tunable arguments.
BATCH_INPUTS = frozenset(
    {
        "token_level_rewards",
        "response_mask",
        "group_ids",
        "values",
        "baseline_rewards",
        "logprobs",
        "old_logprobs",
        "ref_logprobs",
        "advantages",
        "expert_mask",
        "loss_agg_mode",
        "entropy",
        "old_values",
        "returns",
        "teacher_logprobs",
        "global_step",
        "expected_entropy_signal",
        "episode_ids",
        "sequence_logprobs",
    }
)


def with_shared_args(shared: Mapping[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Keyword arguments several algorithm functions take, declared once.

    The decorated function must take ``**kwargs``: it receives ``shared``'s arguments there,
    with these defaults filled in, and its signature (what ``tunable_args`` and the argument
    checks read) lists them as keyword-only arguments before the ``**`` one.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        own = list(signature.parameters.values())
        if not own or own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{fn.__name__} must take **kwargs to receive its shared arguments")
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
            for name, default in shared.items()
        ]

        @functools.wraps(fn)
        def with_defaults(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **{**shared, **kwargs})

        with_defaults.__signature__ = signature.replace(parameters=[*own[:-1], *added, own[-1]])
        return with_defaults

    return decorate


def tunable_args(fn: Callable[..., Any]) -> dict[str, Any]:
    """The user-settable keyword arguments of ``fn`` with their defaults."""
    tunable = {}
    for name, parameter in inspect.signature(fn).parameters.items():
        if parameter.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        if name in BATCH_INPUTS or parameter.default is inspect.Parameter.empty:
            continue
        tunable[name] = parameter.default
    return tunable


def accepted_unused_args(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Arguments ``fn`` takes for compatibility with Trinity-RFT but does not use."""
    return tuple(getattr(fn, "accepted_unused_args", ()))


def check_fn_args(fn: Callable[..., Any], args: Mapping[str, Any], *, key: str) -> None:
    """Raise ``UserError`` naming ``key`` (e.g. ``algorithm.policy_loss_fn_args``) for unknown args."""
    known = tunable_args(fn)
    for name in args:
        if name in known or name in accepted_unused_args(fn):
            continue
        hint = difflib.get_close_matches(name, known, n=1)
        suggestion = f" Did you mean '{hint[0]}'?" if hint else ""
        valid = ", ".join(sorted(known)) or "(none)"
        raise UserError(f"{key}: unknown argument '{name}'.{suggestion} Valid arguments: {valid}.")
