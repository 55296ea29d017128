"""Splitting the cores between explorer and trainer in `both` mode, and undoing it after."""

import threading

import pytest
import torch

from trivium.runtime.cpu_share import restored_torch_threads, split_cores


@pytest.mark.parametrize("total, expected", [(1, (1, 1)), (2, (1, 1)), (3, (2, 1)), (8, (4, 4)), (9, (5, 4))])
def test_the_trainer_gets_the_larger_half(total, expected):
    assert split_cores(total) == expected


def threads_of_a_new_thread() -> int:
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


def test_a_worker_thread_setting_its_threads_leaves_later_threads_unchanged():
    before = threads_of_a_new_thread()
    with restored_torch_threads():
        worker = threading.Thread(target=torch.set_num_threads, args=(max(1, before - 1) if before > 1 else 2,))
        worker.start()
        worker.join()
    assert threads_of_a_new_thread() == before
    assert torch.get_num_threads() == before
