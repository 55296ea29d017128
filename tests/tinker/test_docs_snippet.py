"""The SDK snippet of docs/tinker.md runs against the server as written (only the URL changes)."""

import re
from pathlib import Path

import pytest

pytest.importorskip("tinker")

DOC = Path(__file__).resolve().parents[2] / "docs" / "tinker.md"
DOC_URL = "http://127.0.0.1:8000"


def sdk_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return next(block for block in blocks if "ServiceClient(base_url=" in block and "optim_step" in block)


def test_the_documented_snippet_trains_and_samples(tinker_url, capsys):
    snippet = sdk_snippet()
    assert DOC_URL in snippet
    exec(compile(snippet.replace(DOC_URL, tinker_url), str(DOC), "exec"), {})  # noqa: S102 (the docs' own code)
    printed = capsys.readouterr().out  # decoded samples may hold line breaks of their own
    assert len(re.findall(r"\] (?:stop|length)$", printed, flags=re.MULTILINE)) == 4
