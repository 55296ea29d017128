"""The experience browser shows a multi-turn episode turn by turn: the API's ``turns`` and the page."""

from __future__ import annotations

import torch
import yaml
from fastapi.testclient import TestClient

from trivium.buffer.sql_store import SqlExperienceStore
from trivium.core.episode_turns import episode_turns
from trivium.core.experience import Experience
from trivium.studio.app import create_app

from .conftest import make_run_dir

MESSAGES = [
    {"role": "user", "content": "Say 4."},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "Say 1."},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "Say 9."},
    {"role": "assistant", "content": "9"},
]
EXPECTED = [
    ("user", "Say 4.", False),
    ("assistant", "4", True),
    ("user", "Say 1.", False),
    ("assistant", "7", True),
    ("user", "Say 9.", False),
    ("assistant", "9", True),
]


def three_turn_episode() -> Experience:
    mask = [True, True, False, False, False, True, True, False, False, False, True, True]
    prompt_length = 4
    info = {
        "turns": episode_turns(
            messages=MESSAGES, prompt_messages=1, prompt_length=prompt_length, action_mask=mask
        )
    }
    return Experience(
        tokens=torch.arange(2, 2 + prompt_length + len(mask)),
        prompt_length=prompt_length,
        action_mask=torch.tensor(mask),
        reward=2 / 3,
        task_id="digits:0",
        prompt_text="Say 4.",
        response_text="4 Say 1. 7 Say 9. 9",
        info=info,
    )


def browsable_run(root, assets, database) -> None:
    SqlExperienceStore(str(database), "exp").append([three_turn_episode()])
    run_dir = make_run_dir(root, assets, project="p", name="turns", rewards=[0.5])
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    resolved["buffer"]["trainer_input"]["experience_buffer"].update(
        {"name": "exp", "storage_type": "sql", "path": str(database)}
    )
    (run_dir / "config.resolved.yaml").write_text(yaml.safe_dump(resolved))


def test_the_api_lists_each_turn_with_its_role_text_and_whether_it_was_trained(tmp_path, studio_assets):
    root = tmp_path / "runs"
    root.mkdir()
    browsable_run(root, studio_assets, tmp_path / "buffer.db")
    client = TestClient(create_app(runs_root=root, working_dir=tmp_path))
    (experience,) = client.get("/api/experiences/p/turns").json()["experiences"]
    assert [(t["role"], t["text"], t["trained"]) for t in experience["turns"]] == EXPECTED


def test_the_page_shows_the_turns_and_marks_the_trained_ones(studio, page, studio_assets, tmp_path):
    browsable_run(studio.app.state.runs_root, studio_assets, tmp_path / "buffer.db")
    page.goto(f"{studio.url}/experiences/p/turns")
    page.wait_for_selector("ol.turns li")
    items = page.locator("ol.turns li")
    shown = [
        (
            items.nth(i).get_attribute("data-role"),
            items.nth(i).locator("pre").inner_text(),
            items.nth(i).locator(".who").text_content(),
        )
        for i in range(items.count())
    ]
    assert [(role, text) for role, text, _ in shown] == [(role, text) for role, text, _ in EXPECTED]
    assert [("[trained]" in label) for _, _, label in shown] == [trained for _, _, trained in EXPECTED]
