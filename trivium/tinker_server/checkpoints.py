"""``tinker://`` checkpoint paths and the local directories they name.

A path is ``tinker://<model id>/<kind>/<name>``: ``weights`` for a training state saved by
``save_state`` (weights and optimizer), ``sampler_weights`` for weights saved for sampling.
It names the directory ``<checkpoint root>/<model id>/<kind>/<name>/``. Names and model ids
are restricted to characters that cannot leave that root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trivium.models.server_guard import BadRequest

KINDS = ("weights", "sampler_weights")
SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")


@dataclass(frozen=True)
class CheckpointPath:
    model_id: str
    kind: str
    name: str

    @property
    def uri(self) -> str:
        return f"tinker://{self.model_id}/{self.kind}/{self.name}"

    def directory(self, root: Path) -> Path:
        return root / self.model_id / self.kind / self.name


def check_segment(value: str, what: str) -> str:
    if not SAFE_SEGMENT.match(value or "") or ".." in value:
        raise BadRequest(f"{what} {value!r} must be letters, digits and . _ : - (at most 200)")
    return value


def parse(uri: str) -> CheckpointPath:
    """The parts of a ``tinker://`` path; BadRequest when it is not one this server writes."""
    if not isinstance(uri, str) or not uri.startswith("tinker://"):
        raise BadRequest(f"checkpoint path {uri!r} must start with tinker://")
    parts = uri[len("tinker://") :].split("/")
    if len(parts) != 3 or parts[1] not in KINDS:
        raise BadRequest(
            f"checkpoint path {uri!r} must be tinker://<model id>/(weights|sampler_weights)/<name>"
        )
    return CheckpointPath(
        check_segment(parts[0], "model id"), parts[1], check_segment(parts[2], "checkpoint name")
    )
