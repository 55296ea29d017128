"""Below log.level DEBUG a run ignores the warnings raised inside third-party packages and
turns their progress bars off, keeping what the user set; trivium's own warnings still print."""

import os
import warnings

import pytest

from trivium.runtime.quiet_output import QUIET_ENVIRONMENT, quiet_third_party_output


@pytest.fixture
def environment(monkeypatch) -> dict:
    """os.environ for this test only, without any of the variables the quieting sets."""
    copy = {name: value for name, value in os.environ.items() if name not in QUIET_ENVIRONMENT}
    monkeypatch.setattr(os, "environ", copy)
    return copy


def warnings_shown_after_quieting(level: str) -> list[tuple[str, str]]:
    """(category, module) of the warnings that print after quieting at ``level``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party_output(level)
        warnings.warn_explicit(
            "renamed", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils"
        )
        warnings.warn_explicit("old argument", UserWarning, "peft_model.py", 1, module="peft.peft_model")
        warnings.warn_explicit(
            "old key", DeprecationWarning, "resolve.py", 1, module="trivium.config.resolve"
        )
        warnings.warn_explicit("not a peft", UserWarning, "peftish.py", 1, module="peftish")
    return [(warning.category.__name__, warning.filename) for warning in caught]


def test_at_the_default_verbosity_only_third_party_warnings_are_ignored(environment):
    assert warnings_shown_after_quieting("INFO") == [
        ("DeprecationWarning", "resolve.py"),
        ("UserWarning", "peftish.py"),
    ]
    assert (
        environment["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
        and environment["TRANSFORMERS_VERBOSITY"] == "error"
    )


def test_at_debug_every_warning_prints_and_the_environment_is_left_alone(environment):
    assert len(warnings_shown_after_quieting("DEBUG")) == 4
    assert not set(QUIET_ENVIRONMENT) & set(environment)


def test_a_value_the_user_set_is_kept(environment):
    environment["HF_HUB_DISABLE_PROGRESS_BARS"] = "0"
    quiet_third_party_output("INFO")
    assert environment["HF_HUB_DISABLE_PROGRESS_BARS"] == "0" and environment["TQDM_DISABLE"] == "1"
