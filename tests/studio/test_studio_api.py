"""The Studio's JSON endpoints and helpers, without a browser (FastAPI's TestClient)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
import torch
import yaml
from fastapi.testclient import TestClient

from trivium.buffer.queue_mirror import JsonlMirror
from trivium.buffer.sql_store import SqlExperienceStore
from trivium.config.prepare import prepare
from trivium.config.schema import TriviumConfig
from trivium.config.typecheck import all_key_paths
from trivium.core.experience import Experience
from trivium.studio.app import create_app
from trivium.studio.config_form import form_fields, starting_values

from .conftest import make_run_dir


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    return folder


@pytest.fixture
def client(root, tmp_path):
    return TestClient(create_app(runs_root=root, working_dir=tmp_path))


def form_values(root, assets, **changes) -> dict:
    values = starting_values(str(root))
    values.update({"model.model_path": assets["model"], "buffer.explorer_input.taskset.path": assets["data"]})
    values.update(changes)
    return values


# ---- the config builder ----------------------------------------------------------------------


def test_the_form_has_every_schema_key_except_derived_ones_and_sections():
    keys = {form_field.key for form_field in form_fields()}
    expected = set()
    for path in all_key_paths(TriviumConfig):
        if "[]" in path or ".<name>" in path:
            continue  # inside a list or mapping: edited as YAML through its parent key
        expected.add(path)
    derived = {"checkpoint_job_dir", "stage_index", "stage_name", "previous_stage_job_dir", "cluster.device_type",
               "cluster.explorer_devices", "cluster.auxiliary_devices", "cluster.trainer_devices",
               "cluster.shared_devices", "cluster.uses_ray", "buffer.explorer_input.taskset.is_eval",
               "buffer.trainer_input.experience_buffer.is_eval", "cluster.total_gpu_num", "cluster.rollout_gpu_num",
               "cluster.auxiliary_model_gpu_num", "cluster.explorer_gpu_num", "cluster.trainer_gpu_num",
               "cluster.trainer_node_num", "cluster.trainer_gpu_num_per_node",
               "explorer.rollout_model.bundle_indices"}
    sections = {path for path in expected if any(other.startswith(path + ".") for other in expected)}
    assert keys == expected - derived - sections
    lr = next(form_field for form_field in form_fields() if form_field.key == "algorithm.optimizer.lr")
    assert (lr.kind, lr.default, lr.section, lr.help) == ("float", "1e-06", "algorithm", "Learning rate of the policy (actor).")


def test_check_reports_the_plan_arithmetic_and_its_supply_demand_warning(client, root, studio_assets):
    result = client.post("/api/config/check", json={"values": form_values(root, studio_assets)}).json()
    assert result["valid"] and result["problems"] == []
    (plan,) = result["plans"]
    # 4 tasks x 4 repeats; the trainer takes batch_size x repeat_times when train_batch_size is unset.
    assert (plan["supply_per_step"], plan["train_batch_size"], plan["explorer_steps"], plan["trainer_steps"]) == (16, 16, 20, 20)
    assert plan["warnings"] == []

    result = client.post("/api/config/check", json={"values": form_values(
        root, studio_assets, **{"buffer.train_batch_size": "32"})}).json()
    (plan,) = result["plans"]
    # 20 explorer steps x 16 = 320 samples; the trainer's 20 steps x 32 = 640: 320 missing.
    assert plan["trainer_steps"] == 10
    assert any("trainer takes 32" in warning and "waits on the explorer" in warning for warning in plan["warnings"])


def test_check_names_the_key_of_each_problem(client, root, studio_assets):
    values = form_values(root, studio_assets, **{"algorithm.repeat_times": "many", "algorithm.optimizer.betas": "[0.9,"})
    values["algorithm.not_a_key"] = "1"
    problems = client.post("/api/config/check", json={"values": values}).json()["problems"]
    assert {problem["key"] for problem in problems} == {"algorithm.optimizer.betas", "algorithm.not_a_key"}
    values = form_values(root, studio_assets, **{"algorithm.repeat_times": "many", "synchronizer.sync_interval": "0"})
    problems = client.post("/api/config/check", json={"values": values}).json()["problems"]
    assert [problem["key"] for problem in problems] == ["algorithm.repeat_times"]  # type errors come first
    values = form_values(root, studio_assets, **{"synchronizer.sync_interval": "0", "model.model_path": ""})
    keys = {problem["key"] for problem in client.post("/api/config/check", json={"values": values}).json()["problems"]}
    assert keys == {"synchronizer.sync_interval", "model.model_path"}


def test_downloaded_yaml_is_the_config_and_plan_accepts_it(client, root, studio_assets, tmp_path):
    response = client.post("/api/config/yaml", json={"values": form_values(root, studio_assets)})
    assert response.headers["content-disposition"] == 'attachment; filename="studio-run.yaml"'
    path = tmp_path / "downloaded.yaml"
    path.write_text(response.text)
    assert yaml.safe_load(response.text)["buffer"]["trainer_input"]["experience_buffer"]["storage_type"] == "queue"
    (stage,) = prepare(path)
    assert stage.config.buffer.train_batch_size == 16
    assert stage.config.buffer.trainer_input.experience_buffer.path == str(root / "studio" / "run" / "experiences.db")


def test_an_invalid_config_is_not_started(client, root, studio_assets):
    response = client.post("/api/runs/start", json={"values": form_values(root, studio_assets, **{"buffer.batch_size": "0"})})
    assert response.status_code == 422
    assert "buffer.batch_size" in [problem["key"] for problem in response.json()["problems"]]
    assert not any(root.iterdir())


def test_a_post_from_another_origin_is_refused(client, root, studio_assets):
    response = client.post("/api/runs/start", json={"values": form_values(root, studio_assets)},
                           headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert not any(root.iterdir())


# ---- runs ------------------------------------------------------------------------------------


def test_runs_have_status_mode_and_progress(client, root, studio_assets):
    make_run_dir(root, studio_assets, project="p", name="done", rewards=[0.0, 0.5, 1.0], losses=[1.0, 0.5, 0.25])
    make_run_dir(root, studio_assets, project="p", name="going", rewards=[0.0, 0.5], finished=False)
    broken = make_run_dir(root, studio_assets, project="p", name="broken", rewards=[0.0], finished=False)
    (broken / "log").mkdir()
    (broken / "log" / "trainer.log").write_text(
        "2026-01-01 10:00:00.000001 | INFO     | trainer | step 1\n"
        "2026-01-01 10:00:01.000001 | ERROR    | trainer | the trainer failed\nTraceback (most recent call last):\n"
        "RuntimeError: out of memory\n"
    )
    stale = make_run_dir(root, studio_assets, project="p", name="stale", rewards=[0.0], finished=False)
    old = time.time() - 3600
    for path in (stale / "metrics.jsonl", stale / "config.resolved.yaml"):
        os.utime(path, (old, old))

    runs = {run["run_id"]: run for run in client.get("/api/runs").json()["runs"]}
    assert set(runs) == {"p/done", "p/going", "p/broken", "p/stale"}
    assert runs["p/done"]["status"] == "finished"
    assert (runs["p/done"]["explore_step"], runs["p/done"]["explore_total"], runs["p/done"]["train_step"]) == (3, 3, 3)
    assert runs["p/done"]["mode"] == "colocate"
    assert runs["p/going"]["status"] == "running" and runs["p/going"]["explore_step"] == 2
    assert runs["p/broken"]["status"] == "failed"
    assert runs["p/broken"]["error"].endswith("RuntimeError: out of memory")
    assert runs["p/stale"]["status"] == "stopped"

    detail = client.get("/api/run/p/done").json()
    assert "mode: colocate" in detail["resolved_config"]
    assert client.get("/api/run/p/../../outside").status_code == 404
    assert client.get("/api/run/p/nothing").status_code == 404


def test_metrics_give_the_curves_the_evaluations_and_the_summary(client, root, studio_assets):
    make_run_dir(root, studio_assets, project="p", name="done", rewards=[0.0, 0.5, 1.0], losses=[1.0, 0.5, 0.25],
                 evals=[0.2, 0.6, 0.4])
    data = client.get("/api/metrics/p/done").json()
    charts = {chart["name"]: chart for chart in data["charts"]}
    assert set(charts) == {"reward", "eval_accuracy", "loss", "timing"}
    assert data["summary"]["evals"] == [{"taskset": "test", "best": 0.6, "best_step": 2, "last": 0.4, "last_step": 3}]
    (reward,) = charts["reward"]["lines"]
    assert (reward["label"], reward["steps"], reward["values"]) == ("rollout/reward_mean", [1, 2, 3], [0.0, 0.5, 1.0])
    assert charts["loss"]["lines"][0]["values"] == [1.0, 0.5, 0.25]
    # The trend compares the mean of the first step with the mean of the last (windows of 1 for 3 steps).
    assert "reward: 0.0000 (first 1 steps) -> 1.0000 (last 1), change +1.0000" in data["summary"]["lines"]

    make_run_dir(root, studio_assets, project="p", name="other", rewards=[0.2, 0.4, 0.6])
    compared = client.get("/api/compare", params=[("run", "p/done"), ("run", "p/other")]).json()
    reward_chart = next(chart for chart in compared["charts"] if chart["name"] == "reward")
    assert [line["label"] for line in reward_chart["lines"]] == ["p/done: rollout/reward_mean", "p/other: rollout/reward_mean"]
    assert reward_chart["lines"][1]["values"] == [0.2, 0.4, 0.6]


# ---- experiences -----------------------------------------------------------------------------


def _experience(task: str, reward: float, version: int, mask: list[int], step: int = 0) -> Experience:
    prompt = [2, 88, 86, 261]
    response = [27, 25, 266, 26, 3][: len(mask)]
    return Experience(
        tokens=torch.tensor(prompt + response), prompt_length=len(prompt),
        logprobs=torch.tensor([-0.5 * (index + 1) for index in range(len(mask))]),
        action_mask=torch.tensor(mask, dtype=torch.bool), reward=reward, task_id=task, model_version=version,
        explore_step=step, prompt_text="user", response_text="86",
    )


def _buffer_run(root, assets, buffer: dict):
    run_dir = make_run_dir(root, assets, project="p", name="exp", rewards=[0.5])
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    resolved["buffer"]["trainer_input"]["experience_buffer"].update(buffer)
    (run_dir / "config.resolved.yaml").write_text(yaml.safe_dump(resolved))
    return run_dir


def test_experiences_are_filtered_and_split_by_the_action_mask(client, root, studio_assets, tmp_path):
    database = tmp_path / "buffer.db"
    store = SqlExperienceStore(str(database), "exp")
    store.append([
        _experience("train:0", 0.0, 0, [1, 1, 1]),
        _experience("train:1", 1.0, 1, [1, 1, 0, 0, 1]),  # two model turns around an environment reply
        _experience("eval:0", 1.0, 2, [1, 1]),
    ])
    SqlExperienceStore(str(database), "another_buffer").append([_experience("train:9", 1.0, 0, [1])])
    _buffer_run(root, studio_assets, {"name": "exp", "storage_type": "queue", "path": str(database)})

    everything = client.get("/api/experiences/p/exp").json()
    assert everything["total"] == 3
    rewarded = client.get("/api/experiences/p/exp", params={"min_reward": 0.5, "task": "train"}).json()
    assert rewarded["total"] == 1
    (experience,) = rewarded["experiences"]
    assert (experience["reward"], experience["model_version"], experience["trained_tokens"]) == (1.0, 1, 3)
    roles = [segment["role"] for segment in experience["segments"]]
    assert roles == ["prompt", "model", "environment", "model"]
    model_turn = experience["segments"][1]["tokens"]
    assert [token["logprob"] for token in model_turn] == [-0.5, -1.0]
    assert [token["logprob"] for token in experience["segments"][2]["tokens"]] == [None, None]
    assert experience["segments"][3]["tokens"][0]["logprob"] == -2.5
    # The tiny model's tokenizer turns the ids back into text.
    assert "".join(token["text"] for token in model_turn) == "86"
    by_version = client.get("/api/experiences/p/exp", params={"min_version": 2}).json()
    assert [item["task_id"] for item in by_version["experiences"]] == ["eval:0"]
    page = client.get("/api/experiences/p/exp", params={"limit": 1, "offset": 1}).json()
    assert page["total"] == 3 and [item["task_id"] for item in page["experiences"]] == ["train:1"]


@pytest.mark.parametrize("storage", ["sql", "jsonl"])
def test_experiences_are_filtered_by_the_explorer_step_that_produced_them(client, root, studio_assets, tmp_path, storage):
    # Steps and versions differ (a sync offset): the filter is by step, and the card shows both.
    written = [_experience(f"train:{step}", 1.0, max(0, step - 2), [1], step=step) for step in (0, 1, 2, 3, 3)]
    if storage == "sql":
        path = tmp_path / "buffer.db"
        SqlExperienceStore(str(path), "exp").append(written)
    else:
        path = tmp_path / "mirror.jsonl"
        mirror = JsonlMirror(path)
        mirror.record_written(written)
        mirror.close()
    _buffer_run(root, studio_assets, {"name": "exp", "storage_type": "queue", "path": str(path)})

    data = client.get("/api/experiences/p/exp", params={"min_step": 2, "max_step": 3}).json()
    assert [(item["explore_step"], item["model_version"]) for item in data["experiences"]] == [(2, 0), (3, 1), (3, 1)]
    assert data["total"] == 3
    assert client.get("/api/experiences/p/exp", params={"max_step": 0}).json()["total"] == 1


def test_a_run_the_studio_did_not_start_cannot_be_stopped_from_it(client, root, studio_assets):
    make_run_dir(root, studio_assets, project="p", name="elsewhere", rewards=[0.5])
    response = client.post("/api/runs/stop", json={"run_id": "p/elsewhere"})
    assert response.status_code == 409 and "did not start" in response.json()["detail"]
    assert client.post("/api/runs/stop", json={"run_id": "p/missing"}).status_code == 404
    assert client.post("/api/runs/stop", json={}).status_code == 422
    assert client.get("/api/runs").json()["runs"][0]["stoppable"] is False


def test_a_jsonl_queue_mirror_is_browsable_and_a_memory_queue_says_why_not(client, root, studio_assets, tmp_path):
    mirror_path = tmp_path / "mirror.jsonl"
    mirror = JsonlMirror(mirror_path)
    mirror.record_written([_experience("train:0", 0.0, 0, [1]), _experience("train:1", 1.0, 0, [1, 1])])
    mirror.close()
    _buffer_run(root, studio_assets, {"name": "exp", "storage_type": "queue", "path": str(mirror_path)})
    data = client.get("/api/experiences/p/exp", params={"min_reward": 1}).json()
    assert data["total"] == 1 and data["experiences"][0]["number"] == 2

    _buffer_run(root, studio_assets, {"name": "exp", "storage_type": "queue", "path": None})
    data = client.get("/api/experiences/p/exp").json()
    assert data["total"] == 0 and "kept in memory only" in data["message"]


def test_pages_render(client, root, studio_assets):
    make_run_dir(root, studio_assets, project="p", name="done", rewards=[0.5])
    for url in ("/runs", "/run/p/done", "/experiences/p/done", "/builder", "/compare?run=p/done&run=p/done"):
        response = client.get(url)
        assert response.status_code == 200 and "trivium studio" in response.text, url
    assert client.get("/static/uPlot.iife.min.js").status_code == 200
    fields = client.get("/api/config/fields").json()
    assert fields["beginner_keys"][0] == "project" and json.dumps(fields)


def test_the_studio_command_binds_this_machine_only_by_default():
    from trivium.cli.main import build_parser

    args = build_parser().parse_args(["studio"])
    assert (args.host, args.port, args.runs, args.plugin_dir) == ("127.0.0.1", 8080, "./checkpoints", [])


PLUGIN_ADVANTAGE = """
from trivium.algorithm.advantages import grpo_advantages, register_advantage_fn

register_advantage_fn("studio_test_advantage", needs_group=True)(grpo_advantages)
"""


@pytest.mark.slow
@pytest.mark.parametrize("run_gets_the_plugins, error", [(True, "tokenizer"), (False, "studio_test_advantage")])
def test_a_started_run_that_fails_is_listed_as_failed_with_its_error(
    root, studio_assets, tmp_path, monkeypatch, run_gets_the_plugins, error
):
    from trivium.algorithm import ADVANTAGE_FNS
    from trivium.config.prepare import load_plugins
    from trivium.studio.launch import RunLauncher

    ADVANTAGE_FNS.names()  # load the built-ins, then give this test its own copy of the table
    monkeypatch.setattr(ADVANTAGE_FNS, "_items", dict(ADVANTAGE_FNS._items))
    monkeypatch.delitem(sys.modules, "trivium_plugin_studio_advantage", raising=False)  # import it afresh

    # A plugin advantage function: the Studio's checks and the started run both need the plugin directory.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "studio_advantage.py").write_text(PLUGIN_ADVANTAGE)
    load_plugins([plugins])
    launcher = RunLauncher(working_dir=tmp_path, plugin_dirs=[str(plugins)] if run_gets_the_plugins else [])
    client = TestClient(create_app(runs_root=root, working_dir=tmp_path, launcher=launcher))
    empty_model = tmp_path / "not_a_model"
    empty_model.mkdir()
    values = form_values(root, studio_assets, **{
        "model.model_path": str(empty_model), "name": "broken",
        "algorithm.advantage_fn": "studio_test_advantage",
    })
    started = client.post("/api/runs/start", json={"values": values}).json()
    assert started["run_id"] == "studio/broken"
    assert (root / "studio" / "broken" / "studio" / "config.yaml").is_file()

    deadline = time.monotonic() + 180
    while True:
        runs = {run["run_id"]: run for run in client.get("/api/runs").json()["runs"]}
        run = runs.get("studio/broken")
        if run is not None and run["status"] not in ("running", "pending"):
            break
        assert time.monotonic() < deadline, f"the run did not end: {run}"
        time.sleep(1)
    assert run["status"] == "failed"
    # With the plugins the config passes the run's own checks and the empty model directory fails it;
    # without them the run stops at its checks, before writing its resolved config, naming the function.
    assert error in run["error"]
    assert (root / "studio" / "broken" / "config.resolved.yaml").is_file() == run_gets_the_plugins
    assert client.get("/api/run/studio/broken").status_code == 200
    pinned = yaml.safe_load((root / "studio" / "broken" / "studio" / "config.yaml").read_text())
    assert pinned["checkpoint_job_dir"] == str(root / "studio" / "broken")


def test_the_stages_of_a_run_are_listed_each_with_its_stage(client, root, studio_assets):
    from trivium.config import expand_stages, load_config_from_dict, resolve
    from trivium.config.run_dir import write_resolved

    config = load_config_from_dict({
        "project": "p", "name": "staged", "mode": "colocate", "checkpoint_root_dir": str(root),
        "model": {"model_path": studio_assets["model"], "max_prompt_tokens": 32, "max_response_tokens": 8},
        "buffer": {"total_steps": 3, "explorer_input": {"taskset": {"name": "train", "path": studio_assets["data"]}}},
        "stages": [{"stage_name": "first"}, {"stage_name": "second", "buffer": {"total_steps": 5}}],
    })
    for stage in expand_stages(config):
        write_resolved(resolve(stage))
    runs = {run["run_id"]: run for run in client.get("/api/runs").json()["runs"]}
    assert set(runs) == {"p/staged/first", "p/staged/second"}
    assert runs["p/staged/second"]["stage"] == "second"
    assert runs["p/staged/second"]["stages"] == ["first", "second"]
    assert runs["p/staged/second"]["explore_total"] == 5
