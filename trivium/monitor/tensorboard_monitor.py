"""TensorBoard event files under ``<run_dir>/monitor/tensorboard/<name>_<role>/``.

Point TensorBoard at ``<run_dir>/monitor/tensorboard`` to see the explorer and the trainer
side by side. The resolved config is stored once as a text summary named ``config``.
"""

from __future__ import annotations

from pathlib import Path

from trivium.monitor.base import MONITOR_BACKENDS
from trivium.monitor.optional_backend import BackendRun, OptionalPackageBackend


def tensorboard_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "monitor" / "tensorboard"


@MONITOR_BACKENDS.register("tensorboard")
class TensorboardMonitor(OptionalPackageBackend):
    monitor_type = "tensorboard"
    package_module = "torch.utils.tensorboard"

    def start(self, run: BackendRun) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # A group is a folder: `tensorboard --logdir` over it shows its runs side by side.
        self.log_dir = tensorboard_dir(run.run_dir) / run.group / run.run_name
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        if run.config_dict is not None:
            import yaml

            # Markdown code block: TensorBoard renders text summaries as markdown.
            config_text = yaml.safe_dump(run.config_dict, sort_keys=False, allow_unicode=True)
            self.writer.add_text("config", f"```yaml\n{config_text}\n```", global_step=0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        # Flush every step so a crashed run keeps its curves; steps are seconds apart.
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
