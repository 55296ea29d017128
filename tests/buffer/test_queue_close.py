import threading

import torch

from trivium.buffer.queue_storage import ExperienceQueue
from trivium.core.experience import Experience


def _exp():
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=1.0)


def test_closing_the_consumer_releases_a_writer_blocked_on_a_full_queue():
    queue = ExperienceQueue("full", capacity=2)
    queue.put([_exp(), _exp()])
    writer = threading.Thread(target=queue.put, args=([_exp()],), daemon=True)
    writer.start()
    writer.join(0.3)
    assert writer.is_alive(), "a full queue holds the writer back"
    queue.close_consumer()
    writer.join(2)
    assert not writer.is_alive()
