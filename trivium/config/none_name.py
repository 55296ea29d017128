"""The word ``none`` that keys naming a function, a parser or a strategy accept for "no such thing".

Users write ``kl_loss_fn: none``, ``trainer_strategy: none`` or ``tool_call_parser: none``, or
leave such a key null or empty. Config rules and the typed-settings builders read these keys
through ``named`` (free text such as a chat template through ``text_or_none``), so the settings
carry None and no component compares a name with the word.
"""

from __future__ import annotations

NONE_NAME = "none"


def named(value: str | None) -> str | None:
    """``value``, or None when it names nothing: null, empty, or ``none``."""
    return None if not value or value == NONE_NAME else value


# YAML's null written as text (``"None"``, ``"null"``): free text that reads so is no text.
NULL_TEXTS = ("None", "null")


def text_or_none(value: str | None) -> str | None:
    """Free text such as a chat template, or None when it is null, empty, ``none`` or null's text."""
    return None if named(value) is None or value in NULL_TEXTS else value
