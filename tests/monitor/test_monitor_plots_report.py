"""Plots from metrics.jsonl, report.html, and ``trivium report``."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from trivium.cli.main import main
from trivium.monitor.plots import PLOTS, build_figure, build_figures, write_plots
from trivium.monitor.report import write_report

from .synthetic_run import EVAL_ACCURACIES, STEPS, reward_at, synthetic_records, write_synthetic_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def spec(name):
    return next(plot for plot in PLOTS if plot.name == name)


def test_reward_plot_draws_the_rising_curve_of_the_explorer():
    figure = build_figure(spec("reward"), synthetic_records())
    (axis,) = figure.axes
    (line,) = axis.get_lines()
    assert line.get_label() == "rollout/reward_mean"
    np.testing.assert_array_equal(line.get_xdata(), np.arange(1, STEPS + 1))
    np.testing.assert_allclose(line.get_ydata(), [reward_at(step) for step in range(1, STEPS + 1)])
    assert np.all(np.diff(line.get_ydata()) > 0)
    assert axis.get_xlabel() == "step"


def test_eval_loss_kl_entropy_and_throughput_plots():
    records = synthetic_records()
    (eval_line,) = build_figure(spec("eval_accuracy"), records).axes[0].get_lines()
    assert eval_line.get_label() == "eval/arith/accuracy"
    assert list(eval_line.get_xdata()) == list(EVAL_ACCURACIES) and list(eval_line.get_ydata()) == list(
        EVAL_ACCURACIES.values()
    )
    (loss_line,) = build_figure(spec("loss"), records).axes[0].get_lines()
    np.testing.assert_allclose(loss_line.get_ydata(), [1.0 / step for step in range(1, STEPS + 1)])
    staleness_lines = build_figure(spec("staleness"), records).axes[0].get_lines()
    assert [line.get_label() for line in staleness_lines] == ["staleness/mean", "staleness/max"]
    throughput = build_figure(spec("throughput"), records)
    assert len(throughput.axes) == 2  # tokens/s and experiences/s: different scales, one panel each
    assert {line.get_label() for axis in throughput.axes for line in axis.get_lines()} == {
        "time/throughput_tokens_per_s",
        "time/throughput_experiences_per_s",
    }


def test_plots_without_their_metrics_are_skipped_and_roles_are_labelled_when_mixed():
    records = [
        {"role": "explorer", "step": 1, "rollout/response_length_mean": 10.0},
        {"role": "trainer", "step": 1, "rollout/response_length_mean": 12.0},
    ]
    figures = build_figures(records)
    assert list(figures) == ["response_length"]
    labels = [line.get_label() for line in figures["response_length"].axes[0].get_lines()]
    assert labels == ["rollout/response_length_mean (explorer)", "rollout/response_length_mean (trainer)"]


def test_write_plots_writes_real_pngs(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "run")
    paths = write_plots(run_dir)
    assert [path.stem for path in paths] == [
        "reward",
        "eval_accuracy",
        "loss",
        "kl",
        "entropy",
        "response_length",
        "staleness",
        "throughput",
    ]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_report_embeds_plots_summary_and_config(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "demo" / "rising")
    (run_dir / "config.resolved.yaml").write_text("project: demo\nname: '<rising>'\n")
    html = write_report(run_dir).read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 8 and all(base64.b64decode(image).startswith(PNG_SIGNATURE) for image in images)
    assert "reward: 0.2200 (first 5 steps) -&gt; 0.8200 (last 5)" in html  # summary, escaped
    assert "name: &#39;&lt;rising&gt;&#39;" in html  # config text is escaped, never markup
    assert "<title>Run report: demo/rising</title>" in html
    assert "http" not in html.replace("http-equiv", "")  # self-contained: nothing to fetch


def test_report_without_metrics_is_a_user_error(tmp_path):
    from trivium.errors import UserError

    with pytest.raises(UserError, match="metrics.jsonl"):
        write_report(tmp_path)


def test_cli_report_from_run_dir(tmp_path, capsys):
    run_dir = write_synthetic_run(tmp_path / "run")
    assert main(["report", "--run-dir", str(run_dir)]) == 0
    output = capsys.readouterr().out
    assert "run summary" in output and f"report: {run_dir / 'report.html'}" in output
    assert (run_dir / "plots" / "reward.png").exists()
