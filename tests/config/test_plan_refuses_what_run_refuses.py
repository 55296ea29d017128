"""`trivium plan` refuses exactly what `trivium run` refuses, with the same message.

Every refusal of a config lives in validation; the runtime's settings builders only copy
resolved values. Each case below is a small override of one valid config: `trivium plan`
must exit non-zero naming the problem, and the run path (the stages `trivium run` prepares,
turned into typed settings as its session does, without training) must raise the same message.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
import yaml

from trivium.cli.main import main
from trivium.config.prepare import prepare
from trivium.errors import UserError
from trivium.runtime.settings import build_run_settings

BASE = {
    "project": "demo",
    "name": "refusals",
    "mode": "both",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
    "model": {"model_path": "/models/m", "max_prompt_tokens": 16, "max_response_tokens": 8},
    "cluster": {"gpu_per_node": 0},
    "buffer": {
        "batch_size": 2,
        "total_steps": 3,
        "explorer_input": {"taskset": {"name": "t", "path": "/data/t"}},
    },
}
FOUR_GPUS = {"cluster": {"gpu_per_node": 4}}  # one for the engine, three for the trainer
SQL_EXPERIENCES = {"buffer": {"trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "sql"}}}}
EXTERNAL_ENGINE = {"mode": "explore", "model": {"external_model": {"enable": True, "model_name": "m"}}}


def merged(base: dict, *patches: dict) -> dict:
    result = copy.deepcopy(base)
    for patch in patches:
        for key, value in patch.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merged(result[key], value)
            else:
                result[key] = copy.deepcopy(value)
    return result


# (case, override of BASE, words the refusal must contain)
REFUSALS = [
    (
        "sequence parallelism",
        {"trainer": {"ulysses_sequence_parallel_size": 2}},
        "trainer.ulysses_sequence_parallel_size: sequence parallelism",
    ),
    (
        "ranks with strategy none",
        {"trainer": {"data_parallel_size": 2, "trainer_strategy": "none"}},
        "trainer.data_parallel_size: is 2 but trainer.trainer_strategy is 'none'",
    ),
    (
        "more ranks than trainer GPUs",
        merged(FOUR_GPUS, {"trainer": {"data_parallel_size": 4}}),
        "trainer.data_parallel_size: is 4 but the trainer has 3 GPU(s)",
    ),
    (
        "offload on a CPU",
        {"trainer": {"param_offload": True}},
        "trainer.param_offload: moves GPU memory to the CPU",
    ),
    (
        "offload with one rank",
        merged(FOUR_GPUS, {"trainer": {"data_parallel_size": 1, "param_offload": True}}),
        "trainer.param_offload: is applied through FSDP2 and needs trainer.data_parallel_size >= 2",
    ),
    (
        "offload under ddp",
        merged(
            FOUR_GPUS,
            {"trainer": {"data_parallel_size": 2, "trainer_strategy": "ddp", "param_offload": True}},
        ),
        "trainer_strategy 'ddp' keeps whole models on every rank",
    ),
    (
        "optimizer offload alone",
        merged(FOUR_GPUS, {"trainer": {"data_parallel_size": 2, "optimizer_offload": True}}),
        "trainer.optimizer_offload: without trainer.param_offload",
    ),
    (
        "lora rank",
        {"model": {"lora_configs": [{"lora_rank": 0}]}},
        "model.lora_configs[0].lora_rank: must be >= 1, got 0",
    ),
    (
        "lora dropout",
        {"model": {"lora_configs": [{"lora_dropout": 1.0}]}},
        "model.lora_configs[0].lora_dropout: must be in [0, 1), got 1.0",
    ),
    (
        "lora dtype",
        {"model": {"lora_configs": [{"lora_dtype": "int8"}]}},
        "model.lora_configs[0].lora_dtype: is 'int8'",
    ),
    (
        "lora target modules",
        {"model": {"lora_configs": [{"target_modules": []}]}},
        "model.lora_configs[0].target_modules: must be 'all-linear' or a list of module names",
    ),
    (
        "auxiliary engines",
        {"explorer": {"auxiliary_models": [{"model_path": "/models/judge", "engine_num": 2}]}},
        "explorer.auxiliary_models[0].engine_num: is 2: an auxiliary model runs one engine",
    ),
    (
        "hf tensor parallel",
        {"explorer": {"rollout_model": {"engine_type": "hf", "tensor_parallel_size": 2}}},
        "explorer.rollout_model.tensor_parallel_size: the hf engine runs on one device",
    ),
    (
        "vLLM behaviour option on hf",
        {"explorer": {"rollout_model": {"engine_type": "hf", "ignore_eos": True}}},
        "explorer.rollout_model.ignore_eos: the hf engine cannot honour ignore_eos",
    ),
    (
        "RoPE on an external engine",
        merged(EXTERNAL_ENGINE, SQL_EXPERIENCES, {"model": {"rope_theta": 10000.0}}),
        "model.rope_theta: the external engine serves its own model",
    ),
    (
        "external engine on Ray",
        merged(EXTERNAL_ENGINE, SQL_EXPERIENCES, {"cluster": {"placement": "ray"}}),
        "explorer.rollout_model.engine_type: 'external' has no engine to place on Ray",
    ),
    (
        "teacher missing",
        merged(SQL_EXPERIENCES, {"mode": "explore", "algorithm": {"algorithm_type": "on_policy_distill"}}),
        "explorer.auxiliary_models: on_policy_distill distils from a teacher",
    ),
    (
        "teacher missing when serving",
        {
            "mode": "serve",
            "algorithm": {"algorithm_type": "on_policy_distill"},
            "buffer": {"explorer_input": {"taskset": None}},
        },
        "explorer.auxiliary_models: on_policy_distill distils from a teacher",
    ),
    (
        "mix without expert data",
        {"algorithm": {"sample_strategy": "mix"}},
        "buffer.trainer_input.auxiliary_buffers: algorithm.sample_strategy 'mix'",
    ),
]

# Valid neighbours of the cases: the override, not the base, makes each refusal.
ACCEPTED = [
    ("base", {}),
    (
        "ranks and offload on GPUs",
        merged(
            FOUR_GPUS,
            {"trainer": {"data_parallel_size": 2, "param_offload": True, "optimizer_offload": True}},
        ),
    ),
    ("lora", {"model": {"lora_configs": [{"lora_rank": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}]}}),
    ("auxiliary model", {"explorer": {"auxiliary_models": [{"model_path": "/models/judge"}]}}),
    ("external engine", merged(EXTERNAL_ENGINE, SQL_EXPERIENCES)),
    (
        "a model that only evaluates needs no teacher",
        {
            "mode": "bench",
            "algorithm": {"algorithm_type": "on_policy_distill"},
            "buffer": {"explorer_input": {"eval_tasksets": [{"name": "e", "path": "/data/e"}]}},
        },
    ),
]


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))

    def write_config(patch: dict) -> Path:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(merged(BASE, patch)))
        return path

    return write_config


def plan_error(path: Path, capsys) -> str | None:
    """`trivium plan`'s error message, or None when it accepts the config."""
    capsys.readouterr()
    status = main(["plan", "--config", str(path)])
    err = capsys.readouterr().err
    if status == 0:
        return None
    assert err.startswith("error: "), err
    return err.removeprefix("error: ").strip()


def run_path_error(path: Path) -> str | None:
    """The refusal of `trivium run` up to its settings builders: every stage prepared, then each
    stage's typed settings built as its session does; None when nothing refuses."""
    try:
        for stage in prepare(path):
            build_run_settings(stage.config)
    except UserError as error:
        return str(error).strip()
    return None


@pytest.mark.parametrize("case, override, words", REFUSALS, ids=[case for case, _, _ in REFUSALS])
def test_plan_and_run_refuse_with_the_same_message(write, capsys, case, override, words):
    path = write(override)
    planned = plan_error(path, capsys)
    assert planned is not None, f"{case}: trivium plan accepted it"
    assert words in planned
    assert run_path_error(path) == planned


@pytest.mark.parametrize("case, override", ACCEPTED, ids=[case for case, _ in ACCEPTED])
def test_plan_and_run_accept_the_valid_neighbours(write, capsys, case, override):
    path = write(override)
    assert plan_error(path, capsys) is None
    assert run_path_error(path) is None


SETTINGS_BUILDERS = ["settings.py", "trainer_settings.py", "explorer_settings.py", "builders.py"]
# What only the machine running the run can answer: an environment variable it must set.
READS_AT_RUN_TIME = {"api_key_from_env"}


def test_the_settings_builders_refuse_nothing_a_config_decides():
    runtime = Path(__file__).parents[2] / "trivium" / "runtime"
    raising = []
    for name in SETTINGS_BUILDERS:
        tree = ast.parse((runtime / name).read_text())
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef) and function.name not in READS_AT_RUN_TIME:
                raising += [
                    f"{name}:{function.name}" for node in ast.walk(function) if isinstance(node, ast.Raise)
                ]
    assert raising == []
