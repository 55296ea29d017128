"""Checking a ``model_path`` before transformers sees it: a local Hugging Face model directory.

Owns ``check_model_dir``, which turns the usual ways of getting a model path wrong (it does
not exist, it is a file or a directory without a model, it is a Hub name although nothing is
ever downloaded here) into one ``UserError`` that names the key and says what to do,
instead of a transformers traceback about repositories and network access.
"""

from __future__ import annotations

import re
from pathlib import Path

from trivium.errors import UserError

HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
HOW_TO_GET_ONE = "build one with `trivium init model --out DIR`, or copy a model directory here"


def check_model_dir(model_path: str | Path | None, *, key: str = "model.model_path",
                    needs_tokenizer: bool = False) -> Path:
    """The model directory as a Path; a UserError naming ``key`` when it is not a usable one."""
    if model_path is None or str(model_path).strip() == "":
        raise UserError(f"{key} is not set; give the path of a local Hugging Face model directory ({HOW_TO_GET_ONE}).")
    text = str(model_path)
    path = Path(text).expanduser()
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        hub = (
            ". It looks like a Hugging Face Hub name, but there is no hub here: models are never downloaded, "
            "only read from local directories"
            if HUB_NAME.match(text) and not text.startswith((".", "~")) else ""
        )
        raise UserError(f"{key}={text!r}: no such directory{where}{hub}; {HOW_TO_GET_ONE}.")
    if not path.is_dir():
        raise UserError(f"{key}={text!r} is a file; it must be a model directory (config.json, weights, tokenizer).")
    if not (path / "config.json").is_file():
        raise UserError(
            f"{key}={text!r} is not a model directory: it has no config.json. A Hugging Face model directory "
            f"holds config.json, *.safetensors weights and tokenizer files; {HOW_TO_GET_ONE}."
        )
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        raise UserError(f"{key}={text!r} has a config.json but no weights (*.safetensors or pytorch_model*.bin).")
    if needs_tokenizer and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(
            f"{key}={text!r} has no tokenizer (tokenizer.json or tokenizer_config.json); save the tokenizer "
            "into the model directory."
        )
    return path
