"""Task priorities: Data-Juicer stats -> quality and difficulty scores -> a weighted priority,
by which the task pipeline orders a taskset and keeps its top_k before the explorer reads it."""

from __future__ import annotations

import pytest

from trivium.buffer.pipeline import TaskPipeline, pipeline_problems
from trivium.buffer.task_priority import group_scores, order_by_priority, priority_problems
from trivium.buffer.task_reader import TaskReader
from trivium.config.schema import OperatorConfig, PipelineConfig
from trivium.errors import UserError

from .conftest import storage
from .test_buffer_task_reader import write_taskset


def test_scores_average_normalised_stats_lower_is_better_ones_flipped_and_open_ranges_use_the_taskset():
    stats = {
        0: {"alnum_ratio": 0.8, "special_char_ratio": 0.4, "perplexity": 100.0},
        1: {"alnum_ratio": 0.5, "perplexity": 300.0, "lang_score": 0.9},
        2: {"word_rep_ratio": 0.25, "perplexity": 200.0},
        3: {},
    }
    scores = group_scores(stats)
    # quality: (0.8 + (1 - 0.4)) / 2; 0.5; 1 - 0.25; no stat -> 0
    assert [scores[n]["quality"] for n in range(4)] == pytest.approx([0.7, 0.5, 0.75, 0.0])
    # difficulty: perplexity over the taskset's [100, 300] -> 0, 1, 0.5; lang_score 0.9 -> 1 - 0.9
    assert [scores[n]["difficulty"] for n in range(4)] == pytest.approx([0.0, (1.0 + 0.1) / 2, 0.5, 0.0])

    order, priorities = order_by_priority([0, 1, 2, 3], stats, {"quality": 1.0, "difficulty": -1.0}, 2)
    # 0.7 - 0 = 0.7; 0.5 - 0.55 = -0.05; 0.75 - 0.5 = 0.25; 0
    assert priorities == pytest.approx({0: 0.7, 1: -0.05, 2: 0.25, 3: 0.0})
    assert order == [0, 2]


def test_weights_and_top_k_are_checked_and_a_taskset_without_stats_is_refused():
    problems = priority_problems({"quality": 1.0, "usage_frequency": -0.5, "novelty": 1.0}, 0)
    assert [key for key, _ in problems] == ["priority_weights", "priority_weights", "top_k"]
    assert "use count is 0" in problems[0][1] and "unknown feature 'novelty'" in problems[1][1]
    assert "-1 (keep every task) or at least 1, got 0" in problems[2][1]
    assert pipeline_problems(PipelineConfig(top_k=2), "task_pipeline") == [
        (
            "data_processor.task_pipeline.priority_weights",
            (
                "task priorities are made of the stats the pipeline's Data-Juicer operators compute: add one "
                "(e.g. alphanumeric_filter) to operators or config_path"
            ),
        )
    ]
    assert [key for key, _ in pipeline_problems(PipelineConfig(top_k=2), "experience_pipeline")] == [
        "data_processor.experience_pipeline.top_k"
    ]
    with pytest.raises(UserError, match="no task has a stat a priority is made of"):
        order_by_priority([0, 1], {0: {"text_len": 3.0}}, {"quality": 1.0}, -1)


def test_the_explorer_reads_tasks_by_priority_cut_to_top_k(tmp_path):
    pytest.importorskip("data_juicer")
    rows = [
        # alnum_ratio 1, char_rep_ratio 0 (no 2-gram repeats): quality 1; perplexity 50: difficulty 1
        {"question": "abcd", "answer": "0", "__dj__stats__": {"perplexity": 50.0}},
        # alnum 2/4, char_rep 0: quality 0.75; perplexity 10 (the lowest): difficulty 0
        {"question": "ab!!", "answer": "1", "__dj__stats__": {"perplexity": 10.0}},
        # alnum 1/4; 2-grams a! !! !!: "!!" repeats, 2 of 3 -> char_rep 2/3: quality (1/4 + 1/3) / 2
        {"question": "a!!!", "answer": "2", "__dj__stats__": {"perplexity": 20.0}},
        # alnum 1; 2-grams ab ba ab: char_rep 2/3: quality (1 + 1/3) / 2; difficulty (30-10)/40
        {"question": "abab", "answer": "3", "__dj__stats__": {"perplexity": 30.0}},
    ]
    config = storage(
        "math",
        storage_type="file",
        path=str(write_taskset(tmp_path / "math", rows)),
        format={"prompt_key": "question", "response_key": "answer"},
    )
    pipeline = TaskPipeline.from_pipeline_config(
        PipelineConfig(
            operators=[
                OperatorConfig(name="alphanumeric_filter", args={"min_ratio": 0.0}),
                OperatorConfig(name="character_repetition_filter", args={"rep_len": 2, "max_ratio": 1.0}),
            ],
            target_fields=["question"],
            priority_weights={"quality": 1.0, "difficulty": -1.0},
            top_k=3,
        )
    )
    reader = TaskReader(config, task_pipeline=pipeline)

    # priorities: 1 - 1 = 0; 0.75 - 0 = 0.75; 7/24 - 1/4 = 1/24; 2/3 - 1/2 = 1/6
    assert pipeline.priorities == pytest.approx({0: 0.0, 1: 0.75, 2: 1 / 24, 3: 1 / 6})
    assert len(reader) == 3
    assert [(task.index, task.prompt) for task in reader.read(4)] == [(1, "ab!!"), (3, "abab"), (2, "a!!!")]
