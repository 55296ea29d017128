"""Find the final answer in a model response and compare answers.

Owns answer extraction (``<answer>`` tags, ``\\boxed{}``, last number) and answer
equivalence (numbers, fractions, normalized strings). Pure string functions: they never
raise on arbitrary text and never look at models or tasks.

The answer format the built-in workflows ask for is ``<answer>...</answer>``; ``\\boxed{}``
is accepted too because many models are trained to use it.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from trivium.errors import UserError

ANSWER_TAG_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NUMBER_PATTERN = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_LATEX_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}$")
# Plain decimals and fractions only: an exponent like 1e999999999 would build a huge integer.
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(/\d+)?")
_MAX_NUMBER_CHARS = 100
# Only these characters are treated as wrapping noise around an answer.
_WRAPPING = " \t\n\r$*`'\""


def extract_answer_tag(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` block, stripped; None when absent."""
    matches = ANSWER_TAG_PATTERN.findall(text or "")
    return matches[-1].strip() if matches else None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed); None when absent or unclosed."""
    text = text or ""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    content_start = start + len("\\boxed{")
    for position in range(content_start, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[content_start:position].strip()
            depth -= 1
    return None


def extract_last_number(text: str) -> str | None:
    """The last number-looking substring (``-12``, ``3.5``, ``1,000``, ``3/4``); None when absent."""
    matches = _NUMBER_PATTERN.findall(text or "")
    return matches[-1] if matches else None


def extract_answer(text: str, allow_last_number: bool = True) -> str | None:
    """The response's final answer: ``<answer>`` tag, else ``\\boxed{}``, else the last number."""
    if not isinstance(text, str):
        return None
    for extract in (extract_answer_tag, extract_boxed):
        found = extract(text)
        if found is not None:
            # An answer tag that itself holds a boxed value: keep the inner value.
            return extract_boxed(found) or found
    return extract_last_number(text) if allow_last_number else None


def ground_truth_answer(ground_truth: Any) -> str | None:
    """The reference answer as a string; understands ``#### 42`` and ``\\boxed{42}`` solutions."""
    if ground_truth is None:
        return None
    text = str(ground_truth)
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    return extract_answer(text, allow_last_number=False) or text.strip()


def normalize_answer(text: str) -> str:
    """Case-folded, whitespace-collapsed, without surrounding ``$``, periods or quotes."""
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", str(text))
    text = " ".join(text.split()).strip(_WRAPPING)
    # A sentence-final period or colon is not part of the answer (a leading "." is: ".5").
    text = text.rstrip(".。;:").strip(_WRAPPING)
    return text.casefold()


def parse_number(text: str) -> Fraction | None:
    """An exact value for ``42``, ``-3.50``, ``1,000``, ``3/4``, ``\\frac{3}{4}``, ``50%``; else None."""
    text = normalize_answer(text).replace(" ", "")
    latex = _LATEX_FRACTION.match(text)
    if latex:
        sign, numerator, denominator = latex.groups()
        text = f"{sign}{numerator}/{denominator}"
    percent = text.endswith("%")
    text = text.rstrip("%")
    # Thousands separators only where they really are separators.
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    if len(text) > _MAX_NUMBER_CHARS or not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    return value / 100 if percent else value


def answers_match(predicted: str | None, reference: str | None, tolerance: float = 1e-6) -> bool:
    """Equal as numbers (within ``tolerance`` relative) when both parse, else as normalized strings."""
    if predicted is None or reference is None:
        return False
    predicted_value, reference_value = parse_number(predicted), parse_number(reference)
    if predicted_value is not None and reference_value is not None:
        if predicted_value == reference_value:
            return True
        scale = max(abs(reference_value), 1)
        return abs(predicted_value - reference_value) <= tolerance * scale
    return normalize_answer(predicted) == normalize_answer(reference) != ""


def follows_answer_format(text: str, answer_format: str = "answer_tag") -> bool:
    """True when the response states its final answer the requested way.

    ``answer_tag``: exactly one ``<answer>X</answer>`` with non-empty X, and nothing but
    whitespace after it. ``boxed``: exactly one closed ``\\boxed{X}`` with non-empty X.
    ``any``: either of the two.
    """
    if not isinstance(text, str):
        return False
    if answer_format == "answer_tag":
        matches = list(ANSWER_TAG_PATTERN.finditer(text))
        if len(matches) != 1 or not matches[0].group(1).strip():
            return False
        after = text[matches[0].end() :]
        return not after.strip() and text.lower().count("<answer>") == 1
    if answer_format == "boxed":
        return text.count("\\boxed{") == 1 and bool(extract_boxed(text))
    if answer_format == "any":
        return follows_answer_format(text, "answer_tag") or follows_answer_format(text, "boxed")
    raise UserError(f"answer_format must be 'answer_tag', 'boxed' or 'any', got {answer_format!r}")
