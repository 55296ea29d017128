"""Serve mode's weight loads: the trainer's version reaches the served engines in turns.

Owns the explorer side of a sync in serve mode: the receiver the run's weight transport
hands an update to (``EngineRollout.load_weights``), which loads it into the pool's engines
in turns (``EnginePool.roll``) instead of all at once, then the version handshake with the
synchronizer and the optional self-check against a serving engine.
"""

from __future__ import annotations

import time
from typing import Any

from trivium.serve.engine_pool import EnginePool
from trivium.sync.self_check import check_sync
from trivium.sync.weight_update import WeightUpdate


class EngineRollout:
    """The weight receiver of serve mode (``trivium.sync.transport.WeightReceiver``)."""

    def __init__(self, pool: EnginePool, explorer: Any):
        self.pool = pool
        self.explorer = explorer  # the run's ExplorerWorker: its step names the sync in a timeout

    def step(self) -> int:
        return self.explorer.step()

    def load_weights(self, update: WeightUpdate) -> dict[str, float]:
        start = time.perf_counter()
        # A training service's update is a path its sampler loads (engines with use_sampler).
        weights = None if update.sampler_path is not None else update.load()

        def load(engine: Any) -> int:
            if weights is None:
                return engine.use_sampler(update.sampler_path, update.version)
            return engine.update_weights(weights, update.version)

        self.pool.roll(update.version, load)
        return {"time/sync": time.perf_counter() - start, **update.metrics}


def load_in_turns(session: Any, rollout: EngineRollout) -> dict[str, float]:
    """Publish the trainer's weights and roll them into the served engines; the sync's metrics.

    The trainer waits for the whole roll, so the engines may copy straight from its tensors.
    """
    session.publish_weights(copy=False)
    update = session.synchronizer.poll()
    start = time.perf_counter()
    metrics = session.synchronizer.deliver(
        update, receiver=rollout, broadcaster=session.placement.weight_broadcaster()
    )
    served = rollout.pool.version()
    if served != update.version:
        raise RuntimeError(f"the engines serve version {served} after loading version {update.version}")
    session.synchronizer.confirm(update.version)
    metrics["time/sync"] = time.perf_counter() - start
    if update.probes:
        serving = rollout.pool.in_rotation()
        if serving:
            metrics.update(
                check_sync(
                    update.probe_scores,
                    rollout.pool.engines[serving[0]],
                    update.probes,
                    version=update.version,
                    logger=rollout.explorer.log,
                )
            )
    return metrics
