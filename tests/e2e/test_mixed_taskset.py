"""A taskset whose rows name their own workflow, rendered with the taskset's chat settings
(enable_thinking, reply_prefix)."""

import json
import textwrap

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from trivium.buffer.sql_schema import ExperienceModel
from trivium.cli.main import main

from .conftest import base_config, write_config

TAGGED_WORKFLOW = textwrap.dedent(
    '''
    from trivium.workflows import WORKFLOWS
    from trivium.workflows.math_workflow import MathWorkflow


    class Tagged(MathWorkflow):
        def run(self):
            experiences = super().run()
            for experience in experiences:
                experience.info["ran"] = "tagged"
            return experiences


    WORKFLOWS.register("tagged", Tagged)
    '''
)
# A template that writes an empty thinking block when thinking is off, as Qwen3's does.
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '<no-think> ' }}{% endif %}{% endif %}"
)


@pytest.mark.slow
def test_rows_run_their_own_workflow_and_the_taskset_chat_settings_reach_the_prompt(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "tagged.py").write_text(TAGGED_WORKFLOW)
    rows = [{"question": f"{a} + {a}", "answer": str(2 * a), "kind": "tagged" if a % 2 else ""} for a in range(1, 9)]
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    db = tmp_path / "experiences.db"
    config = base_config(assets, tmp_path / "runs", mode="explore", **{"buffer.batch_size": 8, "buffer.total_steps": 1})
    config["model"]["custom_chat_template"] = TEMPLATE
    taskset = config["buffer"]["explorer_input"]["taskset"]
    taskset.update(path=str(data), split="train", task_selector={"selector_type": "sequential"})
    taskset["format"].update(workflow_key="kind", enable_thinking=False, reply_prefix="Answer:")
    config["buffer"]["trainer_input"]["experience_buffer"] = {"name": "explored", "storage_type": "sql", "path": str(db)}
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0

    experiences = [row.to_experience() for row in sessionmaker(bind=create_engine(f"sqlite:///{db}"))().query(ExperienceModel)]
    assert len(experiences) == 8 * 4
    for experience in experiences:
        question = experience.prompt_text.split("user: ")[1].split("\n")[0]
        odd = int(question.split(" + ")[0]) % 2 == 1
        assert (experience.info.get("ran") == "tagged") == odd
        assert experience.prompt_text.endswith("assistant: <no-think> Answer:")
        assert not experience.response_text.startswith("Answer:")  # the reply is what the model sampled
