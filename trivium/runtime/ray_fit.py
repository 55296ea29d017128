"""Does a GPU layout fit the Ray cluster the run joined? Checked before anything is reserved.

Ray would otherwise wait for resources that never come; this says at once which machines are
missing, with the arithmetic of the config and the GPUs each live node offers.
"""

from __future__ import annotations

from typing import Any

from trivium.config.gpu_layout import GpuLayout
from trivium.errors import UserError


def machine_demands(layout: GpuLayout) -> dict[int, int]:
    """GPUs each machine of the layout needs."""
    demands: dict[int, int] = {}
    for gpu in [*(g for slot in layout.engines for g in slot.gpus), *layout.trainer_gpus]:
        demands[layout.node_of(gpu)] = demands.get(layout.node_of(gpu), 0) + 1
    return demands


def check_cluster_fits(layout: GpuLayout, nodes: list[dict[str, Any]]) -> None:
    """``nodes``: Ray's live nodes (``ray.nodes()`` entries)."""
    demands = sorted(machine_demands(layout).values(), reverse=True)
    offers = sorted((int(node.get("Resources", {}).get("GPU", 0)) for node in nodes), reverse=True)
    # Largest demand to largest node: if that pairing fails, every pairing does.
    if len(offers) >= len(demands) and all(offer >= demand for demand, offer in zip(demands, offers)):
        return
    engines = sum(len(slot.gpus) for slot in layout.engines)
    raise UserError(
        f"the run needs {len(demands)} machine(s) with {', '.join(map(str, demands))} GPU(s) "
        f"(cluster.node_num {layout.node_num} × cluster.gpu_per_node {layout.gpu_per_node} = {layout.total_gpus} GPUs: "
        f"{engines} for the engines, {len(layout.trainer_gpus)} for the trainer), but the Ray cluster's "
        f"{len(offers)} live node(s) offer {', '.join(map(str, offers)) or 'no'} GPU(s); add nodes with GPUs, "
        "or lower cluster.node_num, cluster.gpu_per_node or the engines' engine_num * tensor_parallel_size"
    )
