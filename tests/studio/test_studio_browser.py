"""The Studio in a real browser (headless Chromium through Playwright): build, check, start, watch, browse.

Screenshots go to each test's output folder (``<tmp_path>/screenshots``); with
``TRIVIUM_STUDIO_DOC_IMAGES=docs/images`` they are copied there for ``docs/studio.md``.
"""

from __future__ import annotations

import json

import pytest
import yaml

from trivium.cli.main import main

from .conftest import keep_screenshot, make_run_dir


def field(page, key: str):
    return page.locator(f'[name="{key}"]')


def shoot(page, screenshots, name: str, **options) -> None:
    path = screenshots / f"{name}.png"
    page.screenshot(path=str(path), **options)
    keep_screenshot(path)


def fill_beginner_form(page, studio_assets: dict, **values: str) -> None:
    field(page, "model.model_path").fill(studio_assets["model"])
    field(page, "buffer.explorer_input.taskset.path").fill(studio_assets["data"])
    for key, value in values.items():
        field(page, key.replace("__", ".")).fill(value)


def wait_valid(page) -> None:
    page.wait_for_selector(".validity.ok")


@pytest.mark.slow
def test_beginner_config_shows_the_batch_arithmetic_live_and_downloads_a_config_plan_accepts(
    studio, page, studio_assets, tmp_path, screenshots, capsys
):
    page.goto(f"{studio.url}/builder")
    page.wait_for_selector('[name="model.model_path"]')
    page.wait_for_selector(".validity.bad")  # the model path is required and still empty
    assert "model.model_path" in page.locator("#problems").inner_text()

    fill_beginner_form(page, studio_assets, model__max_prompt_tokens="32", model__max_response_tokens="8")
    wait_valid(page)
    # 4 tasks x 4 repeats from the starting values.
    assert page.locator('[data-fact="supply"]').inner_text() == "explorer supplies 16 experiences per step"
    assert page.locator('[data-fact="demand"]').inner_text() == "trainer takes 16 experiences per step"
    assert page.locator("#warnings li").count() == 0

    # A trainer that takes fewer experiences than the explorer makes: the plan's warning, live.
    field(page, "buffer.train_batch_size").fill("8")
    page.wait_for_selector("#warnings li")
    warning = page.locator("#warnings li").first.inner_text()
    assert "explorer supplies 16 experiences per step, trainer takes 8" in warning
    assert page.locator('[data-fact="demand"]').inner_text() == "trainer takes 8 experiences per step"
    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, screenshots, "studio-builder-beginner", full_page=True)
    field(page, "buffer.train_batch_size").fill("")
    page.wait_for_function("document.querySelectorAll('#warnings li').length === 0")

    # A value of the wrong type is named next to its key while typing.
    field(page, "algorithm.repeat_times").fill("four")
    message = page.locator('[data-message-for="algorithm.repeat_times"]')
    page.wait_for_function(
        "document.querySelector('[data-message-for=\"algorithm.repeat_times\"]').textContent.length > 0"
    )
    assert "integer" in message.inner_text()
    field(page, "algorithm.repeat_times").fill("4")
    wait_valid(page)

    with page.expect_download() as download_info:
        page.click("#download")
    downloaded = tmp_path / "downloaded.yaml"
    download_info.value.save_as(downloaded)
    data = yaml.safe_load(downloaded.read_text())
    assert data["model"]["model_path"] == studio_assets["model"]
    assert data["algorithm"] == {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-5}}

    capsys.readouterr()
    assert main(["plan", "--config", str(downloaded)]) == 0
    printed = capsys.readouterr().out
    assert "explorer: 4 tasks × 4 repeats = 16 experiences per step" in printed
    assert "warnings:" not in printed


def test_expert_mode_shows_every_key_by_section_with_help_and_messages(studio, page, screenshots):
    page.goto(f"{studio.url}/builder")
    page.click("#tab-expert")
    page.wait_for_selector('[data-section="trainer"]')
    fields = json.loads(page.evaluate("fetch('/api/config/fields').then(r => r.text())"))["fields"]
    assert page.locator(".form .field").count() == len(fields) > 150
    sections = page.locator("details.section > summary").all_inner_texts()
    assert any(text.startswith("algorithm") for text in sections) and any(text.startswith("synchronizer") for text in sections)

    page.click('[data-section="synchronizer"] > summary')
    sync_style = field(page, "synchronizer.sync_style")
    assert sync_style.evaluate("node => node.tagName") == "SELECT"
    assert "fixed" in sync_style.locator("option").all_inner_texts()
    help_text = page.locator('[data-key="synchronizer.sync_interval"] .help').inner_text()
    assert help_text == "Steps between weight synchronizations."

    field(page, "synchronizer.sync_interval").fill("0")
    page.wait_for_function(
        "document.querySelector('[data-message-for=\"synchronizer.sync_interval\"]').textContent.length > 0"
    )
    assert page.locator('[data-key="synchronizer.sync_interval"]').get_attribute("class") == "field invalid"
    page.locator('[data-key="synchronizer.sync_interval"]').scroll_into_view_if_needed()
    shoot(page, screenshots, "studio-builder-expert")


@pytest.mark.slow
def test_a_run_started_from_the_studio_is_followed_live_and_its_rewarded_responses_browsed(
    studio, page, studio_assets, screenshots
):
    page.goto(f"{studio.url}/builder")
    page.wait_for_selector('[name="model.model_path"]')
    fill_beginner_form(
        page, studio_assets, name="learn", model__max_response_tokens="8",
        algorithm__optimizer__lr="1e-4", buffer__total_steps="4",
    )
    # Expert keys: a lenient reward (any number in the answer counts), so an untrained model earns some.
    page.click("#tab-expert")
    page.click('[data-section="buffer"] > summary')
    field(page, "buffer.explorer_input.taskset.reward_fn_args").fill("{tolerance: 1000}")
    page.click('[data-section="explorer"] > summary')
    field(page, "explorer.runner_per_model").fill("2")
    page.click('[data-section="trainer"] > summary')
    field(page, "trainer.save_hf_checkpoint").select_option("never")
    wait_valid(page)
    page.click("#start")

    page.wait_for_url(f"{studio.url}/run/studio/learn")
    reward_chart = page.locator('[data-chart="reward"]')
    reward_chart.wait_for(timeout=120_000)
    first_points = int(reward_chart.get_attribute("data-points"))
    # The chart gains points while the run goes (a fast run may already be done when the page
    # first looks: then it has all of them).
    page.wait_for_function(
        f"Number(document.querySelector('[data-chart=\"reward\"]').dataset.points) > {first_points}"
        " || document.querySelector('.status.finished') !== null",
        timeout=120_000,
    )
    page.wait_for_selector(".status.finished", timeout=120_000)
    page.wait_for_function("Number(document.querySelector('[data-chart=\"reward\"]').dataset.points) === 4")
    for chart in ("loss", "entropy", "staleness", "throughput", "timing"):
        assert page.locator(f'[data-chart="{chart}"]').count() == 1, chart
    assert "steps done: explorer 4, trainer 4" in page.locator("#summary").inner_text()
    assert "mode: colocate" in page.locator("#resolved").text_content()
    shoot(page, screenshots, "studio-run", full_page=True)

    page.goto(f"{studio.url}/runs")
    row = page.locator('[data-run-row="studio/learn"]')
    row.wait_for()
    assert "finished" in row.inner_text() and "4 / 4" in row.inner_text()
    runs_shot = screenshots / "studio-runs.png"
    page.locator("main").screenshot(path=str(runs_shot))  # the table only, not the empty page below it
    keep_screenshot(runs_shot)

    page.goto(f"{studio.url}/experiences/studio/learn")
    page.wait_for_selector("article.experience")
    page.fill('input[name="min_reward"]', "0.5")
    page.click('#filters button[type="submit"]')
    page.wait_for_function(
        "[...document.querySelectorAll('article.experience')].length > 0 && "
        "[...document.querySelectorAll('article.experience')].every(a => Number(a.dataset.reward) >= 0.5)"
    )
    rewarded = page.locator("article.experience").first
    assert float(rewarded.get_attribute("data-reward")) == 1.0
    trained = rewarded.locator(".tok.seg-model")
    assert trained.count() >= 1 and rewarded.locator(".tok.seg-prompt").count() > 5
    assert trained.first.get_attribute("title").startswith("logprob -")
    trained.first.hover()
    assert "logprob -" in page.locator("#token-tip").inner_text()
    shoot(page, screenshots, "studio-experiences")


@pytest.mark.slow
def test_a_run_stopped_from_the_studio_saves_its_checkpoint_and_its_steps_can_be_browsed(
    studio, page, studio_assets, screenshots
):
    page.goto(f"{studio.url}/builder")
    page.wait_for_selector('[name="model.model_path"]')
    fill_beginner_form(page, studio_assets, name="long", model__max_response_tokens="8", buffer__total_steps="400")
    wait_valid(page)
    page.click("#start")

    page.wait_for_url(f"{studio.url}/run/studio/long")
    page.wait_for_function(
        "Number(document.querySelector('[data-chart=\"reward\"]')?.dataset.points || 0) >= 3", timeout=120_000
    )
    stop = page.locator("#stop")
    assert stop.is_visible()
    stop.click()
    page.wait_for_selector(".status.stopped", timeout=120_000)
    assert not stop.is_visible()
    runs = page.request.get(f"{studio.url}/api/runs").json()["runs"]
    run = next(item for item in runs if item["run_id"] == "studio/long")
    assert 3 <= run["train_step"] < 400
    run_dir = studio.app.state.runs_root / "studio" / "long"
    # Stopping is Ctrl-C: the step finishes and a checkpoint of it is saved.
    assert (run_dir / f"global_step_{run['train_step']}").is_dir()
    assert "exit code 130" not in page.locator("#error").inner_text()

    page.goto(f"{studio.url}/experiences/studio/long")
    page.wait_for_selector("article.experience")
    page.fill('input[name="min_step"]', "2")
    page.fill('input[name="max_step"]', "2")
    page.click('#filters button[type="submit"]')
    page.wait_for_function(
        "[...document.querySelectorAll('article.experience')].length > 0 && "
        "[...document.querySelectorAll('article.experience .exp-head')].every(h => h.textContent.includes('explorer step 2 '))"
    )
    # The beginner form's 4 tasks x 4 repeats: one explorer step wrote 16 experiences.
    assert page.locator("#count").inner_text().startswith("16 ")
    shoot(page, screenshots, "studio-experiences-by-step")


def test_two_runs_are_compared_on_the_same_plots(studio, page, studio_assets, screenshots):
    root = studio.app.state.runs_root
    make_run_dir(root, studio_assets, project="cmp", name="lr_low", rewards=[0.1, 0.2, 0.25, 0.3], losses=[0.5, 0.4, 0.3, 0.3])
    make_run_dir(root, studio_assets, project="cmp", name="lr_high", rewards=[0.1, 0.4, 0.6, 0.7], losses=[0.5, 0.2, 0.1, 0.05])

    page.goto(f"{studio.url}/runs")
    page.wait_for_selector('[data-run-row="cmp/lr_high"]')
    assert page.locator("#compare-button").is_disabled()
    page.check('input[data-run="cmp/lr_low"]')
    page.check('input[data-run="cmp/lr_high"]')
    page.click("#compare-button")

    page.wait_for_selector('[data-chart="reward"]')
    assert page.locator('[data-chart="reward"]').get_attribute("data-points") == "8"
    legend = page.locator('[data-chart="reward"] .u-legend').inner_text()
    assert "cmp/lr_low: rollout/reward_mean" in legend and "cmp/lr_high: rollout/reward_mean" in legend
    assert page.locator('[data-chart="loss"]').get_attribute("data-points") == "8"
    shoot(page, screenshots, "studio-compare")
