"""``trivium view``: a single-turn experience turn by turn, and stored text printed as written."""

from __future__ import annotations

import torch

from trivium.buffer.sql_store import SqlExperienceStore
from trivium.cli.main import main
from trivium.core.experience import Experience


def stored(tmp_path, **texts) -> str:
    database = tmp_path / "buffer.db"
    experience = Experience(tokens=torch.tensor([5, 6, 7]), prompt_length=1, reward=1.0, **texts)
    SqlExperienceStore(str(database), "exp").append([experience])
    return str(database)


def test_a_single_turn_is_shown_as_its_prompt_and_its_trained_response(tmp_path, capsys):
    database = stored(tmp_path, prompt_text="What is 2 + 3?", response_text="5")
    assert main(["view", "--db", database, "--turns"]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert lines == ["  prompt     What is 2 + 3?", "  response   [trained] 5"]


def test_brackets_in_stored_text_are_printed_not_read_as_markup(tmp_path, capsys):
    database = stored(tmp_path, prompt_text="p [/bold] q", response_text="[red]r[/]")
    assert main(["view", "--db", database]) == 0
    out = capsys.readouterr().out
    assert "p [/bold] q" in out and "[red]r[/]" in out
    assert main(["view", "--db", database, "--turns"]) == 0
    assert "[trained] [red]r[/]" in capsys.readouterr().out
