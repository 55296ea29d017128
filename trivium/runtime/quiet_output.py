"""Third-party output kept off a run's console at the default verbosity.

transformers, huggingface_hub and datasets draw progress bars ("Loading weights", "Writing
model shards", "Generating train split") whenever a model is loaded or saved or a dataset
read, and the libraries a run uses warn about their own internals (peft calling a deprecated
transformers method, for one); all of it lands between trivium's own progress lines. Below
``log.level: DEBUG``, ``quiet_third_party_output``, called where a run starts (the launcher,
and each Ray actor's process):

* switches those bars off and sets those libraries' loggers to errors only, in this process
  and, through the environment variables they read when imported (``QUIET_ENVIRONMENT``), in
  the processes the run starts (trainer ranks, a local Ray's actors). ``TQDM_DISABLE`` also
  quiets any other library's tqdm bar; trivium draws its own progress without tqdm. A value
  the user set for one of these variables is kept, and so is what it asks for;
* ignores the Python warnings raised inside the third-party packages (``THIRD_PARTY``). A
  warning those packages attribute to trivium's code (``stacklevel``) still prints: it asks
  for a fix in trivium, not for silence.

At ``log.level: DEBUG`` nothing is changed, and the bars and warnings print as usual.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from trivium.monitor.logs import parse_level

QUIET_ENVIRONMENT = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub's bars, and transformers' (it asks the hub)
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
    "HF_HUB_VERBOSITY": "error",
    "LOGURU_LEVEL": "ERROR",  # loguru's console handler, as Data-Juicer's operators log through it
}

# The packages that read their log level from a variable of QUIET_ENVIRONMENT.
VERBOSITY_VARIABLES = {
    "transformers": "TRANSFORMERS_VERBOSITY",
    "datasets": "DATASETS_VERBOSITY",
    "huggingface_hub": "HF_HUB_VERBOSITY",
}

# Packages whose warnings and log records below ERROR are noise on a run's console.
THIRD_PARTY = (
    "transformers",
    "tokenizers",
    "huggingface_hub",
    "datasets",
    "safetensors",
    "peft",
    "accelerate",
    "torch",
    "data_juicer",
)


def quiet_third_party_output(level: str | int) -> None:
    if parse_level(level) <= logging.DEBUG:
        return
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", module=rf"({'|'.join(THIRD_PARTY)})(\.|$)")
    for package in THIRD_PARTY:
        if package not in VERBOSITY_VARIABLES:  # those packages' loggers are set through their variables
            logging.getLogger(package).setLevel(logging.ERROR)
    _quiet_imported_libraries()


def _quiet_asked(name: str) -> bool:
    """The environment still asks for quiet: the user did not set ``name`` to something else."""
    return os.environ.get(name) == QUIET_ENVIRONMENT[name]


def _quiet_imported_libraries() -> None:
    """The libraries already imported read the environment before it changed: tell them directly."""
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars
        from huggingface_hub.utils import logging as hub_logging

        if _quiet_asked("HF_HUB_DISABLE_PROGRESS_BARS"):
            disable_progress_bars()
        if _quiet_asked("HF_HUB_VERBOSITY"):
            hub_logging.set_verbosity_error()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        if _quiet_asked("HF_HUB_DISABLE_PROGRESS_BARS"):
            transformers_logging.disable_progress_bar()
        if _quiet_asked("TRANSFORMERS_VERBOSITY"):
            transformers_logging.set_verbosity_error()
    if "datasets" in sys.modules:
        from datasets.utils import logging as datasets_logging

        if _quiet_asked("HF_DATASETS_DISABLE_PROGRESS_BARS"):
            datasets_logging.disable_progress_bar()
        if _quiet_asked("DATASETS_VERBOSITY"):
            datasets_logging.set_verbosity_error()
