"""Which processes a launcher started, read from torchrun's variables."""

import pytest

from trivium.errors import UserError
from trivium.trainer.torchrun_ranks import LaunchedWorld

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29500"}


def test_a_process_started_alone_is_no_launched_world():
    assert LaunchedWorld.from_environment({}) is None
    assert LaunchedWorld.from_environment({**TORCHRUN, "WORLD_SIZE": "1"}) is None


def test_torchrun_variables_give_rank_world_and_device():
    assert LaunchedWorld.from_environment(TORCHRUN) == LaunchedWorld(
        rank=1, world_size=4, local_rank=1, master_addr="10.0.0.2"
    )


def test_a_launch_without_torchrun_variables_says_which_are_missing():
    partial = {"WORLD_SIZE": "2", "RANK": "0"}
    with pytest.raises(UserError, match="LOCAL_RANK, MASTER_ADDR, MASTER_PORT are not set; start it with torchrun"):
        LaunchedWorld.from_environment(partial)
