"""The shared queues of a Ray run: held by their writer's actor, reached by a client elsewhere.

Routing only; a real Ray run moves experiences through them in tests/e2e/test_ray_runtime.py.
"""

import pytest

from trivium.buffer.queue_storage import ExperienceQueue, get_queue, share_queues_through
from trivium.config.schema import StorageConfig
from trivium.runtime.queue_host import QueueClient, QueueHosting, QueueRoute, share_queues

EXPERIENCES = StorageConfig(name="experiences", storage_type="queue")
ROUTE = QueueRoute(host="explorer", namespace="run", storages=(EXPERIENCES,))


@pytest.fixture(autouse=True)
def process_local_queues():
    yield
    share_queues_through(None)  # back to queues within this process


def test_the_host_holds_the_queues_and_finds_them_by_name():
    explorer = QueueHosting()
    share_queues(ROUTE, "explorer", explorer)

    queue = get_queue(EXPERIENCES)

    assert isinstance(queue, ExperienceQueue)
    assert queue is explorer.hosted_queues["experiences"] is get_queue(EXPERIENCES)


def test_another_actor_reaches_the_queue_through_a_client_looked_up_on_first_call():
    share_queues(ROUTE, "trainer", QueueHosting())

    client = get_queue(EXPERIENCES)

    assert isinstance(client, QueueClient)
    assert (client.route, client.name) == (ROUTE, "experiences")
    assert client._handle is None  # the host may not exist yet when the trainer opens its reader


def test_the_host_runs_the_queue_calls_a_client_makes_and_nothing_else():
    explorer = QueueHosting()
    explorer.host_queues(ROUTE.storages)

    explorer.call_queue("experiences", "register_writer")
    assert explorer.call_queue("experiences", "__len__") == 0
    with pytest.raises(ValueError, match="'host_queues' is not a queue call"):
        explorer.call_queue("experiences", "host_queues")


def test_an_actor_that_cannot_hold_queues_is_refused_as_their_host():
    with pytest.raises(TypeError, match="the explorer actor is the run's queue host"):
        share_queues(ROUTE, "explorer", None)
