"""``trivium debug``: try a workflow on one task, against a model served in another terminal.

Three modules, used in this order:

* ``inference_model`` loads the config's rollout model and serves it over an
  OpenAI-compatible HTTP API (``trivium.models.server``) until Ctrl-C;
* ``workflow`` connects to that server, runs ONE task of the config's taskset through the
  config's workflow and reward, prints the experiences and appends them to a SQLite
  database in the output directory;
* ``viewer`` lists the experiences in that database.

Keeping the model in its own process means editing and re-running a workflow plugin costs
seconds, not a model load.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from trivium.cli.command import add_command
from trivium.config.cli_args import add_config_arguments, print_notes
from trivium.errors import UserError
from trivium.models.server_guard import ServerLimits

MODULES = ("inference_model", "workflow", "viewer")
DEBUG_DATABASE = "debug_experiences.db"
DEBUG_BUFFER = "debug"
DEFAULT_PORT = 8010


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "debug", run_debug)
    add_config_arguments(parser)
    parser.add_argument("--module", required=True, choices=MODULES, help="what to run (see above)")
    parser.add_argument(
        "--plugin-dir", action="append", default=[], metavar="DIR",
        help="import every .py file in DIR first, so its registered workflows/rewards/... are known (repeatable)",
    )
    parser.add_argument(
        "--output-dir", default=None, metavar="DIR",
        help=f"where the workflow module writes {DEBUG_DATABASE} (default: <checkpoint_job_dir>/debug)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="model server address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"model server port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--api-key", default=os.environ.get("TRIVIUM_API_KEY"), metavar="KEY",
        help="inference_model: require `Authorization: Bearer KEY` on every request; workflow: send it "
        "(default: $TRIVIUM_API_KEY, else no key)",
    )
    limits = ServerLimits()
    parser.add_argument("--max-n", type=int, default=limits.max_n,
                        help=f"inference_model: most samples per prompt a request may ask for (default {limits.max_n})")
    parser.add_argument("--max-request-bytes", type=int, default=limits.max_request_bytes,
                        help=f"inference_model: largest request body (default {limits.max_request_bytes})")
    parser.add_argument("--task-index", type=int, default=0, metavar="N",
                        help="which row of the taskset to run, counting from 0 in file order (default 0)")
    parser.add_argument("--limit", type=int, default=20, help="viewer: how many of the latest experiences to show")


def run_debug(args: argparse.Namespace) -> int:
    """run one task's workflow against a separately served model

    First serve the rollout model (--module inference_model), then in another terminal run
    one task through the workflow (--module workflow), then look at the results (--module viewer)."""
    _load_plugins(args.plugin_dir)
    config = _load_config(args)
    if args.module == "inference_model":
        return serve_rollout_model(config, args)
    if args.module == "workflow":
        return run_workflow(config, args)
    return show_experiences(config, args)


# ---------------------------------------------------------------- shared set-up
def _load_plugins(directories: list[str]) -> None:
    from trivium.registry import load_plugin_dir

    for directory in directories:
        try:
            load_plugin_dir(directory)
        except FileNotFoundError as error:
            raise UserError(f"--plugin-dir: {error}") from None


def _load_config(args: argparse.Namespace) -> Any:
    from trivium.config.prepare import prepare

    stages = prepare(args.config, args.overrides, mapping=args.mapping)
    first = stages[0]
    print_notes([n for n in first.notes if n.kind != "note"], first.config.stage_name)
    if len(stages) > 1:
        print(f"the config has {len(stages)} stages; debugging with the first, '{first.config.stage_name}'")
    return first.config


def rollout_model_path(config: Any) -> str:
    path = config.explorer.rollout_model.model_path or config.model.model_path
    if not path:
        raise UserError("set model.model_path: the debug server needs the rollout model to serve")
    return str(path)


def _output_dir(config: Any, args: argparse.Namespace) -> Path:
    return Path(args.output_dir) if args.output_dir else Path(config.checkpoint_job_dir) / "debug"


def _command(args: argparse.Namespace, module: str, *extra: str) -> str:
    words = ["trivium", "debug", "--config", args.config, "--module", module, *extra]
    return " ".join(shlex.quote(word) for word in words)


# ---------------------------------------------------------------- inference_model
def serve_rollout_model(config: Any, args: argparse.Namespace) -> int:
    from trivium.models.engine import create_engine
    from trivium.models.server import check_port_free, serve

    rollout = config.explorer.rollout_model
    if config.model.external_model.enable or rollout.engine_type == "external":
        raise UserError(
            "the rollout model is an external API, which is already a server: there is nothing to serve. "
            "Set model.external_model.enable=false and model.model_path to debug with a local model."
        )
    engine_type = rollout.engine_type if rollout.engine_type == "vllm" else "hf"
    check_port_free(args.host, args.port)  # fail before the slow model load
    model_path = rollout_model_path(config)
    print(f"loading {model_path} ({engine_type} engine)...", flush=True)
    engine = create_engine(
        engine_type,
        model_path=model_path,
        dtype=rollout.dtype or config.model.dtype,
        seed=rollout.seed if rollout.seed is not None else config.seed,
        max_model_len=config.model.max_model_len,
    )
    print(f"serving {model_path} at http://{args.host}:{args.port}/v1 (OpenAI-compatible; Ctrl-C to stop)")
    print("in another terminal, run a task with:\n  "
          + _command(args, "workflow", "--port", str(args.port), *_plugin_args(args)), flush=True)
    try:
        serve(engine, host=args.host, port=args.port, model_name=Path(model_path).name or "trivium",
              model_path=model_path, log_level="info", api_key=args.api_key,
              limits=ServerLimits(max_request_bytes=args.max_request_bytes, max_n=args.max_n))
    finally:
        engine.close()
    print("model server stopped")
    return 0


def _plugin_args(args: argparse.Namespace) -> list[str]:
    return [word for directory in args.plugin_dir for word in ("--plugin-dir", directory)]


# ---------------------------------------------------------------- workflow
def run_workflow(config: Any, args: argparse.Namespace) -> int:
    from trivium.buffer.sql_storage import SQLWriter
    from trivium.buffer.sql_store import SqlExperienceStore
    from trivium.debug.display import print_experiences
    from trivium.debug.one_task import pick_task, run_one_task, workflow_logger
    from trivium.debug.remote_engine import RemoteEngine, ServerUnreachable
    from trivium.registry import RegistryError
    from trivium.runtime import builders
    from trivium.runtime.explorer_settings import explorer_settings

    task = pick_task(config, args.task_index)
    base_url = f"http://{args.host}:{args.port}/v1"
    try:
        engine = RemoteEngine(base_url, tokenizer_path=rollout_model_path(config), api_key=args.api_key)
    except ServerUnreachable as error:
        raise UserError(
            f"{error}. Start the model server first, in another terminal:\n  "
            + _command(args, "inference_model", "--port", str(args.port))
        ) from None
    print(f"connected to {engine.health.get('model')} at {base_url} (model version {engine.version()})")
    print(f"task {task.task_id}: workflow '{task.workflow}', reward '{task.reward_fn or 'workflow default'}', "
          f"repeat_times {task.repeat_times}")
    explorer = explorer_settings(config)
    wrappers = builders.build_wrappers(explorer.wrapper, [engine])
    auxiliary = builders.build_auxiliary_wrappers(explorer)
    try:
        experiences = run_one_task(config, task, wrappers[0], auxiliary, workflow_logger(config.log.level))
    except RegistryError as error:
        raise UserError(f"{error} A plugin workflow needs --plugin-dir DIR.") from None
    finally:
        for wrapper in wrappers + auxiliary:
            wrapper.close()
        engine.close()
    print_experiences(experiences)

    output_dir = _output_dir(config, args)
    output_dir.mkdir(parents=True, exist_ok=True)
    database = output_dir / DEBUG_DATABASE
    writer = SQLWriter(SqlExperienceStore(str(database), DEBUG_BUFFER))
    writer.write(experiences)
    writer.finish()
    print(f"wrote {len(experiences)} experience(s) to {database}")
    print(f"look at them with: trivium view --db {shlex.quote(str(database))}")
    print("               or: " + _command(args, "viewer", "--output-dir", str(output_dir)))
    return 0


# ---------------------------------------------------------------- viewer
def show_experiences(config: Any, args: argparse.Namespace) -> int:
    from sqlalchemy import func, select

    from trivium.buffer.sql_engine import get_engine
    from trivium.buffer.sql_schema import ExperienceModel
    from trivium.cli.view import run_view

    if args.limit < 1:
        raise UserError("--limit must be >= 1")
    database = _output_dir(config, args) / DEBUG_DATABASE
    if not database.exists():
        raise UserError(f"no debug experiences at {database}; run `{_command(args, 'workflow')}` first "
                        "(with the same --output-dir)")
    with get_engine(str(database)).connect() as connection:
        total = connection.execute(select(func.count()).select_from(ExperienceModel)).scalar_one()
    # The latest experiences are the ones just debugged.
    view_args = argparse.Namespace(db=str(database), limit=args.limit, offset=max(0, total - args.limit),
                                   buffer=None, width=60)
    return run_view(view_args)
