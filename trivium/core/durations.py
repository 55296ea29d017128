"""Durations in messages: short ones keep their digits, so a 0.001 s timeout never reads "0s"."""

from __future__ import annotations


def seconds_text(seconds: float) -> str:
    """``0.001`` -> ``"0.001s"``, ``2.5`` -> ``"2.5s"``, ``1200`` -> ``"1200s"``."""
    if seconds >= 10:
        return f"{seconds:.0f}s"
    return f"{seconds:.3g}s"
