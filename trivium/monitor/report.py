"""``<run_dir>/report.html``: one self-contained page per run (plots embedded as base64).

It holds the summary, every plot, and the resolved configuration, so it can be mailed or
attached to a ticket and opened anywhere without the run directory.
"""

from __future__ import annotations

import base64
from datetime import datetime
from pathlib import Path

from trivium.errors import UserError
from trivium.monitor.metrics_file import metrics_path, read_metrics
from trivium.monitor.plots import write_plots
from trivium.monitor.summary import compute_summary, summary_lines

REPORT_FILE_NAME = "report.html"
TEMPLATE_NAME = "report.html.jinja"


def write_report(run_dir: str | Path) -> Path:
    """Redraw the plots and write ``report.html``; returns its path."""
    import jinja2

    from trivium.config.run_dir import RESOLVED_FILE

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} does not exist")
    if not metrics_path(run_dir).exists():
        raise UserError(
            f"{metrics_path(run_dir)} not found: the run has logged no step yet, nothing to report"
        )
    records = read_metrics(run_dir)
    plot_paths = write_plots(run_dir, records)
    config_path = run_dir / RESOLVED_FILE
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,  # config values and metric names are user text
    )
    html = environment.get_template(TEMPLATE_NAME).render(
        title=f"Run report: {run_dir.parent.name}/{run_dir.name}",
        run_dir=str(run_dir.resolve()),
        generated=datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        summary="\n".join(summary_lines(compute_summary(run_dir, records))),
        plots=[
            {"name": path.stem, "base64": base64.b64encode(path.read_bytes()).decode("ascii")}
            for path in plot_paths
        ],
        config=config_path.read_text(encoding="utf-8") if config_path.exists() else None,
    )
    report_path = run_dir / REPORT_FILE_NAME
    report_path.write_text(html, encoding="utf-8")
    return report_path
