"""The garbage collector is paused while a process starts a run, then resumes with what start-up
made frozen, unless something else had turned it off."""

import gc

import pytest

from trivium.runtime import startup_collector
from trivium.runtime.startup_collector import collector_paused, startup_finished


@pytest.fixture(autouse=True)
def collector_on():
    assert gc.isenabled()
    yield
    gc.enable()


def test_the_collector_is_off_inside_and_on_after_with_everything_alive_frozen():
    frozen_before = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
        made_at_start_up = [[index] for index in range(1000)]  # 1001 tracked containers
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen_before + len(made_at_start_up) + 1
    assert not startup_collector._paused


def test_startup_finished_ends_the_pause_early_and_the_block_end_changes_nothing():
    with collector_paused():
        startup_finished()
        assert gc.isenabled()
        frozen = gc.get_freeze_count()
        later = [[index] for index in range(100)]  # made after start-up: not frozen
    assert gc.isenabled() and later
    assert gc.get_freeze_count() <= frozen  # (frozen objects freed since leave the count)


def test_a_collector_someone_else_turned_off_stays_off_and_nothing_is_frozen():
    gc.disable()
    frozen = gc.get_freeze_count()
    with collector_paused():
        startup_finished()
        assert not gc.isenabled()
    assert not gc.isenabled()
    assert gc.get_freeze_count() <= frozen


def test_a_nested_pause_resumes_only_at_the_outer_end():
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


class Node:
    pass


def test_garbage_from_before_the_pause_is_freed_not_frozen():
    import weakref

    cycle = Node()
    cycle.itself = cycle
    alive = weakref.ref(cycle)
    del cycle
    with collector_paused():
        pass
    assert alive() is None
