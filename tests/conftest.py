"""Fixtures shared by every test folder."""

import pytest

from trivium.models.tiny import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The tiny preset built once per test session (read-only: copy it before changing it)."""
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", preset="tiny", seed=0))
