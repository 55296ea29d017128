"""Python's cyclic garbage collector while a process starts a run.

Start-up makes hundreds of thousands of objects that live as long as the process (420,000
for the tiny model's run: the modules of torch and transformers, the model, the tokenizer)
and little cyclic garbage. With the collector on, each of its full passes walks every one of
them again: on a 2-core CPU about 0.7 s of a 4.3 s start-up to the first rollout of the tiny
model (``benchmarks/startup.py``).

So the collector is paused while the process imports and builds its components, and once
they are built, every object alive then moves to the permanent generation (``gc.freeze``)
before the collector runs again: later passes skip the objects start-up made, which they
could not have freed. Garbage from before the pause is collected first, so a process that
runs several times (a test session) freezes none of its earlier runs. The cyclic garbage
start-up itself leaves stays until the process ends: about 15,000 objects, 8 MB, mostly
parsed config nodes and no tensors (measured for the tiny model and the Qwen2.5-0.5B shape
alike). ``trivium run`` pauses the collector from its config checks until its first stage's
components are built; each Ray actor, for its constructor.

``collector_paused()`` wraps a start-up; ``startup_finished()`` ends the pause early, as soon
as the components exist, so the run itself runs with the collector on. Both are no-ops when
something else turned the collector off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block (or until ``startup_finished``), then resume it as above."""
    global _paused
    if not gc.isenabled() or _paused:
        yield
        return
    gc.collect()  # what was garbage before start-up is freed, not frozen (cheap in a new process)
    gc.disable()
    _paused = True
    try:
        yield
    finally:
        startup_finished()


def startup_finished() -> None:
    """Freeze what start-up made and turn the collector back on, if ``collector_paused`` paused it."""
    global _paused
    if not _paused:
        return
    _paused = False
    gc.freeze()
    gc.enable()
