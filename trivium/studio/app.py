"""The Studio's web app: server-rendered pages (Jinja2) and the JSON endpoints their scripts poll.

``create_app(runs_root=...)`` builds the FastAPI app. Pages: ``/runs`` (every run),
``/run/<run id>`` (live curves, summary, resolved config), ``/experiences/<run id>``
(the experience browser), ``/compare?run=A&run=B`` and ``/builder`` (the config builder).
Their data comes from ``/api/...``. Only ``POST /api/runs/start`` changes anything on disk,
and only to start a run; ``POST /api/runs/stop`` stops a run the Studio started. A POST from
another web origin is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from trivium import __version__
from trivium.config.errors import ConfigError
from trivium.config.run_dir import RESOLVED_FILE
from trivium.errors import UserError
from trivium.studio import config_form, experiences, metrics, runs
from trivium.studio.launch import CONFIG_FILE_NAME, STUDIO_DIR_NAME, RunLauncher

PACKAGE_DIR = Path(__file__).resolve().parent


def create_app(
    *, runs_root: str | Path, working_dir: str | Path | None = None, launcher: RunLauncher | None = None
) -> FastAPI:
    """The app for the runs under ``runs_root``; runs it starts use ``working_dir`` (default: cwd)."""
    working_dir = Path(working_dir) if working_dir is not None else Path.cwd()
    root = Path(runs_root)
    if not root.is_absolute():
        root = working_dir / root
    launcher = launcher or RunLauncher(working_dir=working_dir)
    app = FastAPI(title="trivium studio", version=__version__, docs_url=None, redoc_url=None)
    app.state.runs_root, app.state.launcher, app.state.working_dir = root, launcher, working_dir
    app.mount("/static", StaticFiles(directory=PACKAGE_DIR / "static"), name="static")
    app.middleware("http")(refuse_foreign_posts)
    register_page_routes(app, Jinja2Templates(directory=str(PACKAGE_DIR / "templates")), root)
    register_run_routes(app, root, launcher)
    register_experience_routes(app, root, working_dir)
    register_builder_routes(app, root)
    register_launch_routes(app, root, launcher)
    return app


async def refuse_foreign_posts(request: Request, call_next):
    """Refuse a POST whose ``Origin`` is another site: a page elsewhere may POST to localhost."""
    origin = request.headers.get("origin")
    if request.method == "POST" and origin and urlsplit(origin).netloc != request.headers.get("host"):
        return JSONResponse({"detail": "cross-origin requests are refused"}, status_code=403)
    return await call_next(request)


def find_run(root: Path, run_id: str) -> Path:
    """The directory of ``run_id`` under ``root``; a 404 when there is none."""
    path = runs.run_path(root, run_id)
    if path is None:
        raise HTTPException(404, f"no run directory {run_id!r} under {root}")
    return path


def register_page_routes(app: FastAPI, templates: Jinja2Templates, root: Path) -> None:
    """The server-rendered pages; their data comes from the ``/api/...`` routes."""

    def page(request: Request, name: str, **context: Any) -> HTMLResponse:
        context.update(runs_root=str(root), version=__version__)
        return templates.TemplateResponse(request, name, context)

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/runs")

    @app.get("/runs", response_class=HTMLResponse)
    def runs_page(request: Request):
        return page(request, "runs.html")

    @app.get("/run/{run_id:path}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str):
        return page(request, "run.html", run_id=run_id)

    @app.get("/experiences/{run_id:path}", response_class=HTMLResponse)
    def experiences_page(request: Request, run_id: str):
        return page(request, "experiences.html", run_id=run_id)

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(request: Request, run: Annotated[list[str] | None, Query()] = None):
        return page(request, "compare.html", run_ids=run or [])

    @app.get("/builder", response_class=HTMLResponse)
    def builder_page(request: Request):
        return page(request, "builder.html")


def register_run_routes(app: FastAPI, root: Path, launcher: RunLauncher) -> None:
    """The read-only run APIs: the list of runs, one run, its metrics, and several compared."""

    @app.get("/api/runs")
    def api_runs() -> dict:
        return {"root": str(root), "runs": [info.to_json() for info in runs.list_runs(root, launcher)]}

    @app.get("/api/run/{run_id:path}")
    def api_run(run_id: str) -> dict:
        path = find_run(root, run_id)
        info = runs.run_info(root, path, launcher)
        resolved_path = path / RESOLVED_FILE
        if resolved_path.is_file():
            resolved = resolved_path.read_text(encoding="utf-8")
        else:
            resolved = (
                "# no config.resolved.yaml: the run stopped before writing it. It was started with:\n"
                + (path / STUDIO_DIR_NAME / CONFIG_FILE_NAME).read_text(encoding="utf-8")
            )
        return {"run": info.to_json(), "resolved_config": resolved}

    @app.get("/api/metrics/{run_id:path}")
    def api_metrics(run_id: str) -> dict:
        path = find_run(root, run_id)
        records = metrics.read_records(path)
        return {
            "run": runs.run_info(root, path, launcher).to_json(),
            "charts": metrics.chart_data(records),
            "summary": metrics.summary_data(path, records),
        }

    @app.get("/api/compare")
    def api_compare(run: Annotated[list[str] | None, Query()] = None) -> dict:
        if not run:
            raise HTTPException(422, "give the runs to compare: /api/compare?run=A&run=B")
        charts: dict[str, dict] = {}
        for run_id in run:
            for chart in metrics.chart_data(metrics.read_records(find_run(root, run_id))):
                merged = charts.setdefault(chart["name"], dict(chart, lines=[]))
                merged["lines"] += [dict(line, label=f"{run_id}: {line['label']}") for line in chart["lines"]]
        return {"runs": run, "charts": list(charts.values())}


def register_experience_routes(app: FastAPI, root: Path, working_dir: Path) -> None:
    """The experience browser's API: one page of a run's stored experiences, filtered."""

    @app.get("/api/experiences/{run_id:path}")
    def api_experiences(
        run_id: str,
        min_step: int | None = None,
        max_step: int | None = None,
        min_version: int | None = None,
        max_version: int | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        task: str | None = None,
        limit: int = Query(20, ge=0, le=experiences.MAX_LIMIT),
        offset: int = Query(0, ge=0),
    ) -> dict:
        path = find_run(root, run_id)
        config = runs.read_resolved(path)
        selection = experiences.ExperienceFilter(
            min_step=min_step,
            max_step=max_step,
            min_version=min_version,
            max_version=max_version,
            min_reward=min_reward,
            max_reward=max_reward,
            task=task or None,
        )
        try:
            location = experiences.buffer_location(config, working_dir=working_dir)
            total, page_rows = experiences.read_experiences(location, selection, limit=limit, offset=offset)
        except UserError as error:
            return {"total": 0, "experiences": [], "message": str(error)}
        tokenizer = _tokenizer_or_none((config.get("model") or {}).get("model_path"), working_dir)
        return {
            "total": total,
            "offset": offset,
            "source": location.location,
            "experiences": [
                experiences.experience_view(number, item, tokenizer) for number, item in page_rows
            ],
            "message": None
            if tokenizer is not None
            else "the model's tokenizer could not be loaded: texts only",
        }


def register_builder_routes(app: FastAPI, root: Path) -> None:
    """The config builder's API: its form fields, a check of the form, and the form as YAML."""

    @app.get("/api/config/fields")
    def api_config_fields() -> dict:
        return {
            "fields": [dataclasses.asdict(form_field) for form_field in config_form.form_fields()],
            "beginner_keys": list(config_form.BEGINNER_KEYS),
            "starting_values": config_form.starting_values(str(root)),
        }

    @app.post("/api/config/check")
    def api_config_check(body: dict) -> dict:
        return config_form.check_form(_values(body)).to_json()

    @app.post("/api/config/yaml")
    def api_config_yaml(body: dict) -> Response:
        check = config_form.check_form(_values(body))
        name = f"{check.data.get('project', 'trivium')}-{check.data.get('name', 'run')}.yaml".replace(
            "/", "_"
        )
        return PlainTextResponse(
            config_form.data_to_yaml(check.data),
            media_type="application/x-yaml",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )


def register_launch_routes(app: FastAPI, root: Path, launcher: RunLauncher) -> None:
    """The only routes that act: start a run from the builder's form, stop a run the Studio started."""

    @app.post("/api/runs/start")
    def api_start_run(body: dict):
        data, problems = config_form.form_to_data(_values(body))
        if problems:
            return _problems_response(problems)
        try:
            started = launcher.start(data)
        except ConfigError as error:
            return _problems_response(error.problems)
        first = [stage.get("stage_name") for stage in data.get("stages") or [] if isinstance(stage, dict)]
        run_dir = started.run_dir.resolve()
        run_id = None
        if root.resolve() in run_dir.parents:
            run_id = run_dir.relative_to(root.resolve()).as_posix() + (f"/{first[0]}" if first else "")
        return {"run_id": run_id, "run_dir": str(started.run_dir), "output": str(started.output_path)}

    @app.post("/api/runs/stop")
    def api_stop_run(body: dict):
        run_id = body.get("run_id")
        if not isinstance(run_id, str):
            raise HTTPException(422, 'send {"run_id": "<project>/<name>"}')
        try:
            stopped = launcher.stop(find_run(root, run_id))
        except UserError as error:
            raise HTTPException(409, str(error)) from None
        return {"run_id": run_id, "run_dir": str(stopped.run_dir), "status": "stopping"}


def _values(body: dict) -> dict[str, str]:
    values = body.get("values")
    if not isinstance(values, dict):
        raise HTTPException(422, 'send {"values": {"dotted.key": "text", ...}}')
    return {str(key): "" if value is None else str(value) for key, value in values.items()}


def _problems_response(problems) -> JSONResponse:
    return JSONResponse(
        {"problems": [{"key": problem.key, "message": problem.message} for problem in problems]},
        status_code=422,
    )


def _tokenizer_or_none(model_path: str | None, working_dir: Path):
    if not model_path:
        return None
    path = Path(model_path)
    try:
        return experiences.load_tokenizer(str(path if path.is_absolute() else working_dir / path))
    except (OSError, ValueError):
        return None
