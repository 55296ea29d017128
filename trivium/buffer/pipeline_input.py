"""A copy of the experiences entering the experience pipeline (``save_input``).

Owns ``PipelineInputWriter``: every experience handed to the pipeline is appended, before any
operator runs, as one JSON line in the buffer's own encoding (``codec.experience_to_json``;
``codec.experience_from_json`` reads it back) to ``input_save_path``, by default
``<run directory>/buffer/explorer_output.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

from trivium.buffer.codec import experience_to_json
from trivium.core.experience import Experience

DEFAULT_FILE = Path("buffer") / "explorer_output.jsonl"


def input_save_path_problem(path: str | None) -> str | None:
    """Why ``input_save_path`` cannot be written here, or None."""
    if path and "://" in path:
        return (
            f"'{path}' is a database URL; the pipeline's input is written as JSON lines: give a file path "
            "ending in .jsonl (or leave it unset for <run directory>/buffer/explorer_output.jsonl)"
        )
    return None


class PipelineInputWriter:
    """Appends experiences to a JSON-lines file, one line each."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, experiences: list[Experience]) -> None:
        if not experiences:
            return
        with self.path.open("a", encoding="utf-8") as file:
            file.writelines(experience_to_json(experience) + "\n" for experience in experiences)
