"""Configuration: schema, loading, resolving derived values, validation, stages and the run plan.

Typical use::

    from trivium.config import load_config, resolve, validate
    config = resolve(load_config("run.yaml", ["algorithm.repeat_times=8"]))
    suggestions = validate(config)
"""

from trivium.config.errors import ConfigError, Problem, Suggestion
from trivium.config.load import config_to_dict, config_to_yaml, load_config, load_config_from_dict
from trivium.config.resolve import resolve, resolve_with_notes
from trivium.config.schema import TriviumConfig
from trivium.config.stages import expand_stages, use_previous_stage_weights
from trivium.config.validate import validate

__all__ = [
    "ConfigError", "Problem", "Suggestion", "TriviumConfig", "load_config", "load_config_from_dict",
    "config_to_dict", "config_to_yaml", "resolve", "resolve_with_notes", "validate", "expand_stages",
    "use_previous_stage_weights",
]
