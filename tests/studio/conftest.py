"""Studio test set-up: a Studio served by uvicorn on a free port, assets, and a headless Chromium.

The browser is Debian's Chromium (``make test`` installs it where apt-get is available);
Playwright drives it through its Python API. Without either, the browser tests skip and
say why; the JSON endpoint tests run regardless.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from trivium.data.builder import build_task_data

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def studio_assets(tmp_path_factory, tiny_model_dir) -> dict:
    data = build_task_data("arithmetic", tmp_path_factory.mktemp("studio_assets") / "data", seed=0,
                           num_train=200, num_test=8)
    return {"model": tiny_model_dir, "data": str(data)}


class ServedStudio:
    def __init__(self, app, url: str, server, thread: threading.Thread):
        self.app, self.url, self._server, self._thread = app, url, server, thread

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        for started in self.app.state.launcher.started_runs():
            if started.exit_code is None:  # a test that failed half-way: do not leave its run behind
                started.process.terminate()
                started.process.wait(timeout=30)


def serve_studio(runs_root: Path, working_dir: Path) -> ServedStudio:
    import uvicorn

    from trivium.models.server import free_port
    from trivium.studio.app import create_app

    app = create_app(runs_root=runs_root, working_dir=working_dir)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="studio-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the Studio's server did not start")
        time.sleep(0.05)
    return ServedStudio(app, f"http://127.0.0.1:{port}", server, thread)


@pytest.fixture
def studio(tmp_path):
    runs_root = tmp_path / "runs"
    runs_root.mkdir()
    served = serve_studio(runs_root, working_dir=tmp_path)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"no browser: {CHROMIUM} is missing (`apt-get install -y chromium`, which `make test` runs)")
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        pytest.skip("playwright is not installed (pip install playwright; it is in the dev extra)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    yield opened
    context.close()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    """Where a test's screenshots go (inside its own output folder)."""
    folder = tmp_path / "screenshots"
    folder.mkdir()
    return folder


def keep_screenshot(path: Path) -> None:
    """With TRIVIUM_STUDIO_DOC_IMAGES=DIR set, copy a screenshot there too (refreshing docs/images)."""
    import os

    target = os.environ.get("TRIVIUM_STUDIO_DOC_IMAGES")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def make_run_dir(root: Path, assets: dict, *, project: str, name: str, rewards: list[float],
                 losses: list[float] | None = None, evals: list[float] | None = None,
                 finished: bool = True) -> Path:
    """A run directory as a run leaves it: a resolved config and metrics.jsonl written by trivium's own writers."""
    from trivium.config import load_config_from_dict, resolve
    from trivium.config.run_dir import write_resolved
    from trivium.monitor.metrics_file import MetricsFileMonitor

    config = resolve(load_config_from_dict({
        "project": project, "name": name, "mode": "colocate", "checkpoint_root_dir": str(root),
        "model": {"model_path": assets["model"], "max_prompt_tokens": 32, "max_response_tokens": 8},
        "buffer": {"batch_size": 2, "total_steps": len(rewards), "explorer_input": {"taskset": {
            "name": "train", "path": assets["data"], "format": {"prompt_key": "question", "response_key": "answer"}}}},
    }))
    run_dir = write_resolved(config).parent
    explorer, trainer = MetricsFileMonitor(run_dir, "explorer"), MetricsFileMonitor(run_dir, "trainer")
    for step, reward in enumerate(rewards, start=1):
        explorer.log({"rollout/reward_mean": reward, "time/explore_step": 0.5}, step)
        if losses is not None:
            trainer.log({"actor/pg_loss": losses[step - 1]}, step)
        if evals is not None:
            explorer.log({"eval/test/accuracy": evals[step - 1]}, step)
    explorer.close()
    trainer.close()
    if finished:
        (run_dir / "report.html").write_text("<html></html>")
    return run_dir
