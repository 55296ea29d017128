"""Keys of Trinity-RFT's configuration: listed when unused, rejected when unsupported,
and rollout-engine options handed to the engine factory."""

import pytest
import yaml

from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare
from trivium.config.unused_keys import engine_options
from trivium.errors import UserError
from trivium.models.engine import without_vllm_options


def plan(tmp_path, extra: dict):
    config = {
        "mode": "colocate",
        "checkpoint_root_dir": str(tmp_path / "runs"),
        "model": {"model_path": "models/tiny", "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {
            "batch_size": 2, "total_steps": 1,
            "explorer_input": {"taskset": {"name": "t", "path": str(tmp_path), "default_workflow_type": "math"}},
        },
    }
    for dotted, value in extra.items():
        node = config
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    (stage,) = prepare(path)
    return stage


def test_set_unused_keys_are_listed_with_the_reason(tmp_path):
    stage = plan(tmp_path, {"trainer.enable_preview": True, "explorer.rollout_model.enable_prefix_caching": True})
    unused = {note.key: note.message for note in stage.notes if note.kind == "unused"}
    assert "trivium studio shows every run" in unused["trainer.enable_preview"]
    assert "hf engine ignores" in unused["explorer.rollout_model.enable_prefix_caching"]
    assert stage.config.trainer.enable_preview is True  # stored, not dropped


def test_behaviour_options_on_the_hf_engine_are_refused_at_plan_time(tmp_path):
    with pytest.raises(ConfigError, match=r"explorer\.rollout_model\.ignore_eos: the hf engine cannot honour"):
        plan(tmp_path, {"explorer.rollout_model.ignore_eos": True})


def test_reply_parsers_are_model_settings_that_every_engine_honours(tmp_path):
    stage = plan(tmp_path, {"explorer.rollout_model.tool_call_parser": "hermes",
                            "explorer.rollout_model.enable_auto_tool_choice": True,
                            "explorer.rollout_model.reasoning_parser": "qwen3"})
    assert not [n for n in stage.notes if "parser" in n.key or "tool_choice" in n.key]
    assert engine_options(stage.config.explorer.rollout_model) == {}  # not engine keywords


@pytest.mark.parametrize("changes, key, message", [
    ({"explorer.rollout_model.tool_call_parser": "hermez", "explorer.rollout_model.enable_auto_tool_choice": True},
     "explorer.rollout_model.tool_call_parser", "did you mean 'hermes'"),
    ({"explorer.rollout_model.reasoning_parser": "deepseek"}, "explorer.rollout_model.reasoning_parser",
     "deepseek_r1, qwen3"),
    ({"explorer.rollout_model.tool_call_parser": "hermes"}, "explorer.rollout_model.enable_auto_tool_choice",
     "together with tool_call_parser"),
    ({"explorer.rollout_model.enable_auto_tool_choice": True}, "explorer.rollout_model.enable_auto_tool_choice",
     "together with tool_call_parser"),
])
def test_reply_parser_mistakes_name_their_key(tmp_path, changes, key, message):
    with pytest.raises(ConfigError) as error:
        plan(tmp_path, changes)
    assert any(problem.key == key and message in problem.message for problem in error.value.problems)


def test_images_are_rejected_with_the_reason(tmp_path):
    with pytest.raises(UserError, match="image_key: is not supported: multimodal"):
        plan(tmp_path, {"buffer.explorer_input.taskset.format.image_key": "images"})


def test_data_selector_is_folded_into_task_selector(tmp_path):
    stage = plan(tmp_path, {"buffer.explorer_input.taskset.data_selector": {"selector_type": "random", "kwargs": {"a": 1}}})
    selector = stage.config.buffer.explorer_input.tasksets[0].task_selector
    assert selector.selector_type == "random" and selector.args == {"a": 1}


def test_engine_options_reach_the_factory_only_when_set_and_hf_refuses_behaviour_ones(tmp_path):
    stage = plan(tmp_path, {"explorer.rollout_model.enable_chunked_prefill": True, "explorer.rollout_model.use_v1": True})
    assert engine_options(stage.config.explorer.rollout_model) == {"enable_chunked_prefill": True}
    assert without_vllm_options("hf", {"enable_chunked_prefill": True, "dtype": "float32"}) == {"dtype": "float32"}
    with pytest.raises(UserError, match="cannot honour ignore_eos"):
        without_vllm_options("hf", {"ignore_eos": True})
