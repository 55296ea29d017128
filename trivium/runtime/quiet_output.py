"""Third-party output kept off a run's console at the default verbosity.

transformers and huggingface_hub draw progress bars ("Loading weights", "Writing model
shards") whenever a model is loaded or saved, which a run does at every start, checkpoint and
export; they land between trivium's own progress lines. Below ``log.level: DEBUG`` they are
switched off, in this process and, through ``HF_HUB_DISABLE_PROGRESS_BARS`` (which both
libraries read when imported), in the processes the run starts (trainer ranks, Ray actors).
A value the user set for that variable is kept.
"""

from __future__ import annotations

import logging
import os
import sys

from trivium.monitor.logs import parse_level


def quiet_third_party_output(level: str | int) -> None:
    if parse_level(level) <= logging.DEBUG:
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] != "1":
        return
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
