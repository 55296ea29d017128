"""Data-Juicer operators, named by their own names, in the task and experience pipelines.

They run for real (py-data-juicer, in this process) over hand-written rows and experiences;
operators that need a model, a service or a rewrite of an experience's text are refused
by the config check that `trivium plan` runs.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.config.conftest import patched
from trivium.buffer import create_reader, create_writer
from trivium.buffer.pipeline import ExperiencePipeline, TaskPipeline
from trivium.buffer.task_reader import TaskReader
from trivium.config import ConfigError, load_config_from_dict, resolve, validate
from trivium.config.schema import OperatorConfig
from trivium.config.validate import suggestions
from trivium.errors import UserError

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
                                "args": {"api_or_hf_model": "qwen2.5-7b-instruct", "text_key": "question"},
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
    notes = {note.key: note.message for note in suggestions(resolve(config))}

    task, experiences = (
        "data_processor.task_pipeline.operators",
        "data_processor.experience_pipeline.operators",
    )
    assert "unknown operator 'text_lenght_filter'" in problems[f"{task}[0].name"]
    # Close names from both registries: trivium's task operators, then Data-Juicer's.
    assert (
        "Did you mean 'length_filter', 'field_filter', 'text_length_filter'," in problems[f"{task}[0].name"]
    )
    # A model behind an OpenAI-compatible API is the user's to name: noted, not refused.
    assert f"{task}[1]" not in problems
    assert notes[f"{task}[1]"].startswith(
        "the Data-Juicer operator 'llm_difficulty_score_filter' calls the model 'qwen2.5-7b-instruct' at "
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
    assert notes["service.data_juicer"].startswith(
        "server_url: 'http://127.0.0.1:5005', auto_start: True: Data-Juicer runs in the explorer's process"
    )
    # The recipe's operator, too, is noted with the model it calls.
    assert (
        "'llm_quality_score_filter' calls the model 'qwen2.5-32b-instruct' at " in notes[f"{experiences}[3]"]
    )
    assert len(problems) == 7


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
    assert notes["service.data_juicer"].startswith(
        "auto_start: True: Data-Juicer runs in the explorer's process"
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


class ScoringService:
    """An OpenAI-compatible chat endpoint on loopback that grades a sample by one word in it."""

    def __init__(self):
        import threading

        import uvicorn
        from fastapi import FastAPI

        app, self.requests = FastAPI(), []

        @app.post("/v1/chat/completions")
        def chat(body: dict) -> dict:
            self.requests.append(body)
            text = body["messages"][-1]["content"]
            score = 1 if "garbled" in text else 5
            dimensions = {name: score for name in ("accuracy", "grammar", "informativeness", "coherence")}
            content = json.dumps({"dimension_scores": dimensions, "flags": [], "recommendation": ["keep"]})
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}/v1"

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def scoring_service():
    service = ScoringService()
    yield service
    service.close()


def test_an_operator_that_calls_a_model_api_filters_taskset_rows(tmp_path, monkeypatch, scoring_service):
    monkeypatch.setenv("OPENAI_BASE_URL", scoring_service.url)
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    rows = [
        {"question": "What is 2+3?", "answer": "5"},
        {"question": "garbled ?? 2 +", "answer": "5"},
        {"question": "Compute 7*6.", "answer": "42"},
    ]
    config = storage(
        "math",
        storage_type="file",
        path=str(write_taskset(tmp_path / "math", rows)),
        format={"prompt_key": "question", "response_key": "answer"},
    )
    pipeline = TaskPipeline.from_configs(
        operators(("llm_quality_score_filter", {"api_or_hf_model": "grader", "min_score": 0.5})),
        target_fields=["question"],
    )
    reader = TaskReader(config, task_pipeline=pipeline)

    assert [t.prompt for t in reader.read(2)] == ["What is 2+3?", "Compute 7*6."]
    # One question when the operator was built, then one per row, each naming the model.
    assert len(scoring_service.requests) == 1 + 3
    assert {request["model"] for request in scoring_service.requests} == {"grader"}


def test_an_unreachable_model_api_stops_the_pipeline_with_its_address(monkeypatch):
    import socket

    with socket.socket() as unused:  # a loopback port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(UserError) as raised:
        TaskPipeline.from_configs(
            operators(("llm_quality_score_filter", {"api_or_hf_model": "grader"})), target_fields=["question"]
        )
    message = str(raised.value)
    assert (
        f"calls the model 'grader' at http://127.0.0.1:{port}/v1/chat/completions, which did not answer"
        in message
    )
    assert "ConnectError" in message
