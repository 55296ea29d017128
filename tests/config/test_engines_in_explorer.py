"""``cluster.engines_in_explorer``: on Ray, the rollout engines inside the explorer's actor or in actors of their own."""

from __future__ import annotations

import pytest

from tests.config.conftest import patched
from trivium.config.errors import ConfigError
from trivium.config.load import load_config_from_dict
from trivium.config.plan import explain
from trivium.config.resolve import resolve, resolve_with_notes
from trivium.config.validate import validate


def resolved(cluster: dict, rollout: dict | None = None, mode: str = "both"):
    patch = {"mode": mode, "cluster": cluster}
    if rollout:
        patch["explorer"] = {"rollout_model": rollout}
    return resolve_with_notes(load_config_from_dict(patched(patch)))


@pytest.mark.parametrize(
    ("cluster", "rollout", "inside"),
    [
        ({"placement": "ray"}, None, True),  # the CPU of one machine, hf engines: nothing to gain from more processes
        ({"placement": "ray", "node_num": 2}, None, False),  # several machines: the engines spread over them
        ({"placement": "ray"}, {"engine_type": "vllm"}, False),  # vLLM starts processes of its own
        ({"placement": "ray", "gpu_per_node": 2}, None, False),  # GPUs: each engine's actor holds its GPUs
    ],
)
def test_null_decides_from_the_devices_the_machines_and_the_engine_type(cluster, rollout, inside):
    config, _ = resolved(cluster, rollout)
    assert config.cluster.uses_ray
    assert config.cluster.engines_in_explorer is inside


def test_engine_types_declare_whether_they_share_the_explorers_process():
    from trivium.models.engine import shares_explorer_process

    assert shares_explorer_process("hf") and shares_explorer_process("external")  # an HTTP client is light
    assert not shares_explorer_process("vllm") and not shares_explorer_process("no.such:engine")


def test_an_explicit_choice_on_a_cpu_is_kept_and_shown_by_plan():
    config, _ = resolved({"placement": "ray", "engines_in_explorer": False})
    assert config.cluster.engines_in_explorer is False
    validate(config)
    inside, _ = resolved({"placement": "ray"})
    assert any(line.startswith("placement: Ray actors (explorer hosting 1 rollout engine(s), trainer)")
               for line in explain(inside).device_lines)
    assert any(line.startswith("placement: Ray actors (explorer, 1 rollout engine(s), trainer)")
               for line in explain(config).device_lines)


def test_false_outside_ray_is_noted_not_ignored():
    config, notes = resolved({"engines_in_explorer": False}, mode="colocate")
    assert not config.cluster.uses_ray and config.cluster.engines_in_explorer is True
    (note,) = [note for note in notes if note.key == "cluster.engines_in_explorer"]
    assert "keeps its engines in its own process" in note.message


@pytest.mark.parametrize(
    ("cluster", "rollout", "message"),
    [
        ({"gpu_per_node": 2}, None, r"cluster.engines_in_explorer: is true but the cluster has GPUs"),
        ({}, {"engine_type": "vllm"}, r"'vllm' engines cannot share the explorer's process"),
    ],
)
def test_true_where_engines_cannot_share_the_explorer_is_refused(cluster, rollout, message):
    config = resolve(load_config_from_dict(patched({
        "mode": "both",
        "cluster": {"placement": "ray", "engines_in_explorer": True, **cluster},
        **({"explorer": {"rollout_model": rollout}} if rollout else {}),
    })))
    with pytest.raises(ConfigError, match=message):
        validate(config)


def test_a_run_that_does_not_explore_on_gpus_has_no_engines_to_place():
    config, _ = resolved({"placement": "ray", "gpu_per_node": 2}, mode="train")
    validate(config)  # nothing refused: the key is about engines, and a train run has none
