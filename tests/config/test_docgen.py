"""docs/configuration.md is generated from the schema and must be up to date."""

from __future__ import annotations

import dataclasses

from trivium.config import schema
from trivium.config.docgen import DOC_PATH, render
from trivium.config.typecheck import all_key_paths


def test_committed_doc_is_up_to_date():
    assert DOC_PATH.read_text() == render(), "run: python -m trivium.config.docgen"


def test_every_field_has_help_and_a_default():
    for name in dir(schema):
        cls = getattr(schema, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            for field in dataclasses.fields(cls):
                assert field.metadata.get("help"), f"{cls.__name__}.{field.name} has no help"
            cls()  # every field has a default


def test_doc_lists_every_key_once_per_section():
    text = render()
    for path in all_key_paths(schema.TriviumConfig):
        leaf = path.rsplit(".", 1)[-1].split("[")[0]
        assert f"| `{leaf}` |" in text
    assert "| `repeat_times` | int | `1` |" in text
    assert "Choices: `both`, `train`, `explore`, `bench`, `colocate`, `serve`." in text
