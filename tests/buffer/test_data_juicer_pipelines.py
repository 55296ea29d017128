"""Data-Juicer operators, named by their own names, in the task and experience pipelines.

They run for real (py-data-juicer, in this process) over hand-written rows and experiences;
operators that need a model, a service or a rewrite of an experience's text are refused
by the config check that `trivium plan` runs.
"""

from __future__ import annotations

import pytest

from tests.config.conftest import patched
from trivium.buffer import create_reader, create_writer
from trivium.buffer.pipeline import ExperiencePipeline, TaskPipeline
from trivium.buffer.task_reader import TaskReader
from trivium.config import ConfigError, load_config_from_dict, resolve, validate
from trivium.config.schema import OperatorConfig

from .conftest import experience, storage
from .test_buffer_task_reader import write_taskset

pytest.importorskip("data_juicer")


def operators(*specs):
    return [OperatorConfig(name=name, args=args) for name, args in specs]


def test_taskset_rows_are_cleaned_filtered_and_deduplicated_before_the_reader(tmp_path):
    rows = [
        {"question": "What is 2+3? https://example.com/a", "answer": "5"},  # link removed, then stripped
        {"question": "1+1?", "answer": "2"},  # 4 characters: below min_len
        {"question": "\u2003Add 4 and 4\u2003please", "answer": "8"},  # em spaces become plain ones
        {"question": "How many legs do three spiders have in total?", "answer": "24"},  # 45 > max_len
        {"question": "What is 2+3? https://other.org/b", "answer": "5"},  # same as row 0 once cleaned
        {"question": "Compute 7*6 please", "answer": "42"},  # untouched
    ]
    config = storage(
        "math",
        storage_type="file",
        path=str(write_taskset(tmp_path / "math", rows)),
        format={"prompt_key": "question", "response_key": "answer"},
    )
    pipeline = TaskPipeline.from_configs(
        operators(
            ("clean_links_mapper", {}),
            ("whitespace_normalization_mapper", {}),
            ("text_length_filter", {"min_len": 8, "max_len": 30}),
            ("document_deduplicator", {}),
        ),
        target_fields=["question"],
    )
    reader = TaskReader(config, task_pipeline=pipeline)

    tasks = reader.read(3)
    assert [(t.index, t.prompt, t.ground_truth) for t in tasks] == [
        (0, "What is 2+3?", "5"),
        (2, "Add 4 and 4 please", "8"),
        (5, "Compute 7*6 please", "42"),
    ]
    assert len(reader) == 3
    _, metrics = pipeline.filter_rows([dict(row) for row in rows], list(range(len(rows))))
    assert metrics == {
        "clean_links_mapper/dropped": 0.0,
        "whitespace_normalization_mapper/dropped": 0.0,
        "text_length_filter/dropped": 2.0,
        "document_deduplicator/dropped": 1.0,
    }


def responses(*texts):
    batch = []
    for index, text in enumerate(texts):
        item = experience(index, group_id=f"g{index}")
        item.response_text = text
        batch.append(item)
    return batch


def test_experience_pipeline_drops_short_and_repeated_responses_before_the_buffer(tmp_path):
    pipeline = ExperiencePipeline.from_configs(
        operators(
            ("text_length_filter", {"min_len": 5}),
            ("document_deduplicator", {}),
        ),
        target_fields=["response_text"],
    )
    batch = responses("42", "The answer is 42", "The answer is 42", "It is 7")

    kept, metrics = pipeline.process(batch)
    writer = create_writer(storage("dj_experiences"))
    writer.write(kept)
    stored = create_reader(storage("dj_experiences")).read(2, timeout=1)

    # "42" has 2 characters (< 5); the second "The answer is 42" repeats the first.
    assert [(e.eid, e.response_text) for e in stored] == [("e1", "The answer is 42"), ("e3", "It is 7")]
    assert [e.info["text_len"] for e in stored] == [16, 7]  # the filter's stat, kept in info
    assert metrics["text_length_filter/dropped"] == 1.0
    assert metrics["document_deduplicator/dropped"] == 1.0
    assert metrics["experience_count"] == 2.0


def test_a_recipe_file_feeds_its_stats_to_reward_shaping(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "project_name: lengths\ntext_keys: response_text\n"
        "process:\n  - text_length_filter:\n      min_len: 3\n"
    )
    pipeline = ExperiencePipeline.from_configs(
        operators(
            ("data_juicer", {"config_path": str(recipe)}),
            (
                "reward_shaping_mapper",
                {"reward_shaping_configs": [{"stats_key": "text_len", "op_type": "ADD", "weight": 0.1}]},
            ),
        )
    )
    batch = responses("no", "yes", "maybe")
    for item in batch:
        item.reward = 1.0

    kept, metrics = pipeline.process(batch)

    # "no" is dropped (2 < 3); rewards: 1 + 0.1 * 3 and 1 + 0.1 * 5.
    assert [e.eid for e in kept] == ["e1", "e2"]
    assert [e.reward for e in kept] == pytest.approx([1.3, 1.5])
    assert metrics["data_juicer/dropped"] == 1.0


def test_the_config_check_refuses_what_cannot_run_here(tmp_path):
    recipe = tmp_path / "scoring.yaml"
    recipe.write_text(
        "process:\n  - llm_quality_score_filter:\n      api_or_hf_model: qwen2.5-32b-instruct\n"
    )
    config = load_config_from_dict(
        patched(
            {
                "service": {"data_juicer": {"server_url": "http://127.0.0.1:5005", "auto_start": True}},
                "data_processor": {
                    "task_pipeline": {
                        "operators": [
                            {"name": "text_lenght_filter", "args": {"min_len": 3}},
                            {
                                "name": "llm_difficulty_score_filter",
                                "args": {"api_or_hf_model": "qwen2.5-7b-instruct"},
                            },
                            {
                                "name": "words_num_filter",
                                "args": {"tokenization": True, "text_key": "question"},
                            },
                            {"name": "text_length_filter", "args": {"min_length": 3, "text_key": "question"}},
                            {"name": "whitespace_normalization_mapper", "args": {}},
                        ]
                    },
                    "experience_pipeline": {
                        "operators": [
                            {"name": "reward_filtre", "args": {}},
                            {"name": "whitespace_normalization_mapper", "args": {}},
                            {"name": "text_length_filter", "args": {"text_key": "answer"}},
                            {"name": "data_juicer", "args": {"config_path": str(recipe)}},
                        ]
                    },
                },
            }
        )
    )
    with pytest.raises(ConfigError) as raised:
        validate(resolve(config))
    problems = {problem.key: problem.message for problem in raised.value.problems}

    task, experiences = (
        "data_processor.task_pipeline.operators",
        "data_processor.experience_pipeline.operators",
    )
    assert "unknown operator 'text_lenght_filter'" in problems[f"{task}[0].name"]
    # Close names from both registries: trivium's task operators, then Data-Juicer's.
    assert (
        "Did you mean 'length_filter', 'field_filter', 'text_length_filter'," in problems[f"{task}[0].name"]
    )
    assert (
        "'llm_difficulty_score_filter' cannot run here: it calls the model 'qwen2.5-7b-instruct' through a "
        "network API" in problems[f"{task}[1]"]
    )
    assert (
        "'words_num_filter' cannot run here: it loads the sentencepiece model 'en', which Data-Juicer "
        "downloads at run time" in problems[f"{task}[2]"]
    )
    assert "it takes no args ['min_length'] (did you mean min_len?)" in problems[f"{task}[3]"]
    assert (
        "needs the fields it reads: set data_processor.task_pipeline.target_fields" in problems[f"{task}[4]"]
    )
    assert "Did you mean 'reward_filter', 'reward_std_filter'" in problems[f"{experiences}[0].name"]
    assert "rewrites text, and an experience is trained on its token ids" in problems[f"{experiences}[1]"]
    assert "reads ['answer'], which an experience does not have" in problems[f"{experiences}[2]"]
    assert problems["service.data_juicer"].startswith(
        "server_url: 'http://127.0.0.1:5005': py-data-juicer ships no data-processing server"
    )
    assert problems["service.data_juicer"].endswith("remove server_url")
    assert (
        "'llm_quality_score_filter' cannot run here: it calls the model 'qwen2.5-32b-instruct'"
        in problems[f"{experiences}[3].args"]
    )
    assert len(problems) == 10


def test_auto_start_is_explained_and_runnable_operators_pass_the_check():
    config = load_config_from_dict(
        patched(
            {
                "service": {"data_juicer": {"auto_start": True}},
                "data_processor": {
                    "task_pipeline": {
                        "target_fields": ["question"],
                        "operators": [
                            {"name": "text_length_filter", "args": {"min_len": 3}},
                            {"name": "length_filter", "args": {"key": "question", "max_length": 100}},
                        ],
                    }
                },
            }
        )
    )
    notes = {note.key: note.message for note in validate(resolve(config))}
    assert notes["service.data_juicer.auto_start"].startswith(
        "nothing to start: Data-Juicer operators run in the explorer's process"
    )
    assert not any(key.startswith("data_processor") for key in notes)


def test_running_operators_leaves_the_process_environment_in_place():
    # datasets' map rebinds os.environ to a plain dict; changes made after it would then no
    # longer reach the processes a run starts (trainer ranks, Ray, torchrun's rendezvous).
    import os

    from trivium.buffer.data_juicer_ops import build_operator, run_operators

    environment = os.environ
    operator = build_operator("text_length_filter", {"min_len": 2, "text_key": "text"}, on_experiences=False)
    kept = run_operators([operator], [{"text": "ok", "__trivium_position__": 0}])
    assert [sample["text"] for sample in kept] == ["ok"]
    assert os.environ is environment and isinstance(os.environ, os._Environ)
