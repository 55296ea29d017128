"""A pipeline's own keys: save_input keeps every experience that entered, and config_path runs a
Data-Juicer recipe's operators in place of `operators`, over task rows or experiences."""

from __future__ import annotations

import pytest

from tests.config.conftest import patched
from trivium.buffer.codec import experience_from_json
from trivium.buffer.pipeline import ExperiencePipeline, TaskPipeline, pipeline_problems
from trivium.buffer.task_reader import TaskReader
from trivium.config import load_config_from_dict, resolve
from trivium.config.schema import OperatorConfig, PipelineConfig
from trivium.errors import UserError
from trivium.runtime.builders import build_experience_pipeline, build_task_pipeline
from trivium.runtime.settings import build_run_settings

from .conftest import experience, storage
from .test_buffer_task_reader import write_taskset


def test_saved_input_holds_every_experience_that_entered_including_those_a_filter_dropped(tmp_path):
    pipeline = ExperiencePipeline.from_pipeline_config(
        PipelineConfig(
            operators=[OperatorConfig(name="reward_filter", args={"min_reward": 0.5})], save_input=True
        ),
        run_dir=tmp_path,
    )
    first = [experience(0, reward=1.0), experience(1, reward=0.0)]
    second = [experience(2, reward=0.2), experience(3, reward=0.9)]

    kept = pipeline.process(first)[0] + pipeline.process(second)[0]

    assert [e.eid for e in kept] == ["e0", "e3"]
    lines = (tmp_path / "buffer" / "explorer_output.jsonl").read_text().splitlines()
    saved = [experience_from_json(line) for line in lines]
    assert [(e.eid, e.reward) for e in saved] == [("e0", 1.0), ("e1", 0.0), ("e2", 0.2), ("e3", 0.9)]
    assert saved[1].tokens.tolist() == first[1].tokens.tolist()


def test_input_save_path_needs_save_input_and_a_file():
    assert [
        key
        for key, _ in pipeline_problems(
            PipelineConfig(input_save_path="sqlite:///input.db"), "experience_pipeline"
        )
    ] == ["data_processor.experience_pipeline.input_save_path"] * 2
    problems = pipeline_problems(PipelineConfig(save_input=True), "task_pipeline")
    assert problems[0][0] == "data_processor.task_pipeline.save_input"
    with pytest.raises(UserError, match="is a database URL"):
        ExperiencePipeline.from_pipeline_config(
            PipelineConfig(save_input=True, input_save_path="sqlite:///input.db"), run_dir="."
        )


def test_a_pipeline_recipe_cleans_and_filters_task_rows_and_experiences(tmp_path):
    pytest.importorskip("data_juicer")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "project_name: tidy\nprocess:\n  - clean_links_mapper:\n  - text_length_filter:\n      min_len: 8\n"
    )
    rows = [
        {"question": "What is 2+3? https://example.com/a", "answer": "5"},  # link removed
        {"question": "1+1?", "answer": "2"},  # 4 characters: below min_len
        {"question": "Compute 7*6 please", "answer": "42"},
    ]
    config = storage(
        "math",
        storage_type="file",
        path=str(write_taskset(tmp_path / "math", rows)),
        format={"prompt_key": "question", "response_key": "answer"},
    )
    tasks = TaskPipeline.from_pipeline_config(
        PipelineConfig(config_path=str(recipe), target_fields=["question"])
    )
    reader = TaskReader(config, task_pipeline=tasks)
    assert [(t.index, t.prompt) for t in reader.read(3)] == [(0, "What is 2+3? "), (2, "Compute 7*6 please")]

    # On experiences a text rewrite is refused; a recipe's own text_keys names the field read.
    (tmp_path / "lengths.yaml").write_text(
        "text_keys: response_text\nprocess:\n  - text_length_filter:\n      min_len: 3\n"
    )
    on_experiences = PipelineConfig(config_path=str(tmp_path / "lengths.yaml"))
    assert pipeline_problems(on_experiences, "experience_pipeline") == []
    batch = [experience(i) for i in range(3)]
    for item, text in zip(batch, ["no", "yes", "maybe"]):
        item.response_text = text
    kept, metrics = ExperiencePipeline.from_pipeline_config(on_experiences, run_dir=tmp_path).process(batch)
    assert [e.eid for e in kept] == ["e1", "e2"]
    assert metrics["text_length_filter/dropped"] == 1.0
    assert (
        "rewrites text"
        in pipeline_problems(PipelineConfig(config_path=str(recipe)), "experience_pipeline")[0][1]
    )

    both = PipelineConfig(config_path=str(recipe), operators=[OperatorConfig(name="pass_rate_filter")])
    assert "set one of the two" in pipeline_problems(both, "task_pipeline")[0][1]
    with pytest.raises(UserError, match="config_path: a recipe file gives"):
        TaskPipeline.from_pipeline_config(both)


def test_a_run_keeps_its_experience_pipeline_input_in_its_run_directory(tmp_path):
    config = load_config_from_dict(
        patched(
            {
                "checkpoint_root_dir": str(tmp_path),
                "data_processor": {"experience_pipeline": {"save_input": True}},
            }
        )
    )
    settings = build_run_settings(resolve(config))
    pipeline = build_experience_pipeline(settings.explorer, settings.run_dir)
    assert pipeline.operators == [] and build_task_pipeline(settings.explorer) is None

    pipeline.process([experience(0), experience(1)])

    saved = (settings.run_dir / "buffer" / "explorer_output.jsonl").read_text().splitlines()
    assert [experience_from_json(line).eid for line in saved] == ["e0", "e1"]
