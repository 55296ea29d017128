"""The two worked veRL examples convert to the trivium configs the alignment guide shows.

The launch scripts are kept verbatim under fixtures/; the expected configs are the guide's,
without comments. Intentional differences are applied to the expected side, each named.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from trivium.cli.main import main
from trivium.config.dotted_paths import set_path
from trivium.interop.verl_import import IGNORED, MAPPED, PASSED, convert_script
from trivium.interop.yaml_render import render_yaml

FIXTURES = Path(__file__).parent / "fixtures"
PPO, GRPO = "verl_ppo_qwen2_7b_rm", "verl_grpo_deepseek7b_seq_balance"


def normalise(tree):
    """Numbers written as text (PyYAML reads 1e-6 as a string) become floats."""
    if isinstance(tree, dict):
        return {key: normalise(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [normalise(item) for item in tree]
    if isinstance(tree, str):
        try:
            return float(tree)
        except ValueError:
            return tree
    if isinstance(tree, (int, float)) and not isinstance(tree, bool):
        return float(tree)
    return tree


def expected(name: str) -> dict:
    return yaml.safe_load((FIXTURES / f"{name}.expected.yaml").read_text())


def converted(name: str):
    return convert_script((FIXTURES / f"{name}.sh").read_text(), f"{name}.sh")


def test_ppo_example_matches_the_guide():
    want = expected(PPO)
    # The guide gives the math taskset a sampling temperature that no veRL key sets.
    del want["buffer"]["explorer_input"]["tasksets"][1]["rollout_args"]
    # trivium's own trainer reads the micro-batch size under trainer.*, so it goes there too.
    set_path(want, "trainer.ppo_micro_batch_size_per_gpu", 16)
    conversion = converted(PPO)
    assert normalise(conversion.config) == normalise(want)


def test_grpo_example_matches_the_guide():
    conversion = converted(GRPO)
    assert normalise(conversion.config) == normalise(expected(GRPO))


@pytest.mark.parametrize("name", [PPO, GRPO])
def test_written_yaml_reads_back_to_the_same_config(name):
    conversion = converted(name)
    text = render_yaml(conversion.config, conversion.comments)
    assert yaml.safe_load(text) == conversion.config
    assert "# data.train_batch_size / actor_rollout_ref.actor.ppo_mini_batch_size = 1024 / 256" in text


def test_every_argument_is_reported_exactly_once():
    conversion = converted(PPO)
    script = (FIXTURES / f"{PPO}.sh").read_text()
    given = {
        line.split("=", 1)[0].strip()
        for line in script.splitlines()
        if "=" in line and "." in line.split("=")[0]
    }
    reported = [line.source for line in conversion.report]
    assert len(reported) == len(set(reported))
    assert set(reported) == given
    by_key = {line.source: line for line in conversion.report}
    assert by_key["data.truncation"].action == IGNORED
    assert by_key["data.return_raw_chat"].action == IGNORED
    assert by_key["actor_rollout_ref.rollout.name"].action == IGNORED
    assert by_key["critic.optim.lr"].action == PASSED
    assert by_key["trainer.test_freq"].action == MAPPED


def test_script_variables_expand_and_environment_variables_become_references():
    conversion = converted(PPO)
    tasksets = conversion.config["buffer"]["explorer_input"]["tasksets"]
    assert [t["path"] for t in tasksets] == ["${oc.env:HOME}/data/gsm8k", "${oc.env:HOME}/data/math"]
    assert any("$@" in note for note in conversion.notes)


@pytest.mark.parametrize("name, trainer_devices", [(PPO, 4), (GRPO, 6)])
def test_converted_config_loads_and_resolves(name, trainer_devices):
    from trivium.config.load import load_config_from_dict
    from trivium.config.resolve import resolve

    config = resolve(load_config_from_dict(copy.deepcopy(converted(name).config)))
    assert config.buffer.batch_size == 256
    assert config.synchronizer.sync_interval == 4
    assert config.synchronizer.sync_style == "fixed"
    # The GPU split the importer chose is the one the resolver derives: 8 GPUs minus inference.
    assert config.cluster.trainer_devices == trainer_devices


def test_step_counted_keys_get_a_note_about_units():
    notes = " ".join(converted(GRPO).notes)
    assert "trainer.test_freq" in notes and "x 4" in notes


def test_cli_writes_the_config_and_prints_the_report(tmp_path, capsys):
    out = tmp_path / "grpo.yaml"
    assert main(["convert", "verl", "--script", str(FIXTURES / f"{GRPO}.sh"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ignored (2):" in printed and "data.truncation" in printed
    assert normalise(yaml.safe_load(out.read_text())) == normalise(expected(GRPO))
    # A second run does not overwrite the file without --force.
    assert main(["convert", "verl", "--script", str(FIXTURES / f"{GRPO}.sh"), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
