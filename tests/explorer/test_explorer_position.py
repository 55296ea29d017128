"""The explorer's recorded position never runs ahead of the experiences it has written."""

import threading

import torch

from trivium.buffer.base import BufferExhausted
from trivium.core.experience import Experience
from trivium.core.task import Task
from trivium.explorer.explorer import Explorer
from trivium.explorer.runner import RunnerPool


class Rows:
    """A taskset reader with a position, like TaskReader's."""

    def __init__(self, total):
        self.total, self.position = total, 0

    def read(self, batch_size):
        if self.position >= self.total:
            raise BufferExhausted("done")
        tasks = [Task(raw={}, task_id=f"row{self.position + i}") for i in range(batch_size)]
        self.position += batch_size
        return tasks

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


class Gate:
    """A workflow that waits until the test lets it finish."""

    can_repeat = True
    started, release = threading.Event(), threading.Event()

    def run(self):
        Gate.started.set()
        Gate.release.wait(10)
        return [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=1.0)]


class Writer:
    def __init__(self):
        self.written = []

    def write(self, experiences):
        self.written.extend(experiences)


def test_the_position_of_a_step_is_recorded_only_after_its_experiences_are_written():
    writer = Writer()
    pool = RunnerPool(make_workflow=lambda task, runner: Gate(), num_runners=1, max_retry_times=1)
    explorer = Explorer(taskset_reader=Rows(8), writer=writer, runner_pool=pool, batch_size=2)
    Gate.release.set()
    explorer.explore_step()
    assert explorer.state_dict()["step"] == 1 and explorer.state_dict()["taskset"] == {"position": 2}
    assert {e.explore_step for e in writer.written} == {1}

    Gate.release.clear()
    Gate.started.clear()
    running = threading.Thread(target=explorer.explore_step)
    running.start()
    assert Gate.started.wait(10)
    # Step 2 has read its tasks and not written yet: a checkpoint now must record step 1.
    assert explorer.state.step == 2
    assert explorer.state_dict() == {"step": 1, "failed_tasks": 0, "taskset": {"position": 2}}
    Gate.release.set()
    running.join(10)
    assert explorer.state_dict()["step"] == 2 and explorer.state_dict()["taskset"] == {"position": 4}
    assert [e.explore_step for e in writer.written] == [1, 1, 2, 2]

    resumed = Explorer(taskset_reader=Rows(8), writer=Writer(), runner_pool=pool, batch_size=2)
    resumed.load_state_dict(explorer.state_dict())
    assert resumed.state_dict() == explorer.state_dict()
