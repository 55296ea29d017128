"""The plugin-workflow example of docs/agents.md (examples/plugins/) runs as written, and
``trivium view --turns`` shows its three-turn episodes turn by turn."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from trivium.buffer.codec import row_to_experience
from trivium.cli.main import main

from .conftest import read_metrics

PLUGINS = Path(__file__).resolve().parents[2] / "examples" / "plugins"


@pytest.mark.slow
def test_the_plugin_example_plays_three_turn_episodes_that_view_shows_turn_by_turn(
    tmp_path, tiny_model_dir, capsys
):
    config = yaml.safe_load((PLUGINS / "say_digits.yaml").read_text())
    config["checkpoint_root_dir"] = str(tmp_path / "runs")
    config["model"]["model_path"] = tiny_model_dir
    config["buffer"]["explorer_input"]["taskset"]["path"] = str(PLUGINS / "say_digits_tasks.jsonl")
    config["buffer"]["total_steps"] = 2
    path = tmp_path / "say_digits.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["run", "--config", str(path), "--plugin-dir", str(PLUGINS)]) == 0

    run_dir = tmp_path / "runs" / "say_digits" / "tiny"
    rollouts = [r for r in read_metrics(run_dir) if "rollout/reward_mean" in r]
    assert len(rollouts) == 2 and all(r["rollout/episode_truncated"] == 0 for r in rollouts)
    database = run_dir / "experiences.db"
    capsys.readouterr()
    assert main(["view", "--db", str(database), "--turns", "--limit", "1"]) == 0
    out = capsys.readouterr().out

    stored = _first_stored_experience(database)
    digits = [t["text"] for t in stored.info["turns"] if t["role"] == "user"]
    assert all(re.fullmatch(r"Say \d\.", text) for text in digits) and len(digits) == 3
    replies = [t["text"] for t in stored.info["turns"] if t["trained"]]
    # One line per turn (a reply's own line breaks continue indented): role, [trained], text.
    turn_lines = [line.rstrip() for line in out.splitlines() if re.match(r"  \S", line)]
    assert [line.split()[0] for line in turn_lines] == ["user", "assistant"] * 3
    assert turn_lines[0::2] == [f"  user       {text}" for text in digits]
    assert all(line.startswith("  assistant  [trained]") for line in turn_lines[1::2])
    plain = [(line, reply) for line, reply in zip(turn_lines[1::2], replies) if reply.strip().isprintable()]
    assert plain and all(line == f"  assistant  [trained] {reply}".rstrip() for line, reply in plain)
    assert "32 experience(s)" in out.splitlines()[0]
    # The stored response_text is every turn after the first prompt.
    assert all(text in stored.response_text for text in digits[1:])


def _first_stored_experience(database: Path):
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from trivium.buffer.sql_schema import ExperienceModel

    with Session(create_engine(f"sqlite:///{database}")) as session:
        row = session.scalars(select(ExperienceModel).order_by(ExperienceModel.id).limit(1)).first()
        assert json.dumps(row.info)  # the turns are plain JSON in the info column
        return row_to_experience(row)
