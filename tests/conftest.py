"""Fixtures shared by every test folder, and how the suite shares two workers.

``make test`` runs the suite on two pytest-xdist workers (``--dist loadgroup``), then the tests
marked ``ray`` in one process: they start a local Ray instance, and Ray's clean-up (``ray stop
--force``, the process checks) is machine-wide. (Run with the rest on two workers, they all
go to one worker, one at a time.) Slow tests are handed out first, so the long ones do not
end up last on one worker while the other sits idle.
"""

import pytest

from trivium.models.tiny import build_tiny_model


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist tags each test with its group
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order otherwise


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The tiny preset built once per test session (read-only: copy it before changing it)."""
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", preset="tiny", seed=0))


@pytest.fixture(scope="session")
def tiny_tools_model_dir(tmp_path_factory) -> str:
    """The tiny-tools preset (the tiny shape, a chat template with tools) built once per session."""
    from trivium.models.tiny_tools import build_tiny_tools_model

    return str(build_tiny_tools_model(tmp_path_factory.mktemp("tiny_tools_model") / "model", seed=0))
