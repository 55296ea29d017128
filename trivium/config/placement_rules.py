"""Checks of where the components run: the compute device and the GPU layout.

Reads what ``resolve()`` derived (``device_type``, ``compute_device``, the device split and
Trinity-RFT's placement keys) and refuses what cannot be placed, with the arithmetic.
"""

from __future__ import annotations

from trivium.config.errors import Problem
from trivium.config.gpu_layout import config_layout, derived_placement_keys, layout_problems
from trivium.config.modes import traits_of
from trivium.config.schema import TriviumConfig


def check_placement(config: TriviumConfig, problems: list[Problem]) -> None:
    cluster, device_problems = config.cluster, len(problems)
    if cluster.compute_device == "cuda" and cluster.device_type != "cuda":
        problems.append(Problem(
            "cluster.compute_device",
            f"is cuda but the cluster has no GPU (cluster.node_num {cluster.node_num} * cluster.gpu_per_node "
            f"{cluster.gpu_per_node} = 0); set gpu_per_node or compute_device: auto",
        ))
    rehearses = not traits_of(config.mode).takes_turns  # one device taken in turns has nothing to place
    if cluster.compute_device == "cpu" and cluster.device_type == "cuda" and not cluster.uses_ray and rehearses:
        problems.append(Problem(
            "cluster.compute_device",
            "cpu on a cluster with GPUs rehearses a Ray placement; this run is placed in one process "
            "(cluster.placement), so set cluster.placement: ray, or gpu_per_node: 0 to run on the CPU",
        ))
    layout = config_layout(config)
    if layout is not None and len(problems) == device_problems:
        problems.extend(Problem("cluster", text) for text in layout_problems(layout))
    for derived in derived_placement_keys(config):
        given = getattr(derived.owner, derived.attribute)
        if given != derived.value:
            problems.append(Problem(
                derived.key,
                f"is {given!r} but this config's layout gives {derived.value!r} (it is derived from "
                "cluster.node_num, cluster.gpu_per_node and the engines' engine_num * tensor_parallel_size; "
                "`trivium plan` shows the layout); remove it or make it agree",
            ))
    _check_engines_in_explorer(config, problems)


def _check_engines_in_explorer(config: TriviumConfig, problems: list[Problem]) -> None:
    """Engines inside the explorer's actor compute on the CPU and are of a type that shares a process."""
    cluster = config.cluster
    if not (cluster.uses_ray and cluster.engines_in_explorer and traits_of(config.mode).explores):
        return
    if cluster.device_type == "cuda":
        problems.append(Problem(
            "cluster.engines_in_explorer",
            "is true but the cluster has GPUs: each rollout engine takes its GPUs in an actor of its own; "
            "remove it (null decides) or run on the CPU (cluster.gpu_per_node: 0)",
        ))
        return
    from trivium.models.engine import shares_explorer_process

    engine_type = config.explorer.rollout_model.engine_type
    if not shares_explorer_process(engine_type):
        problems.append(Problem(
            "cluster.engines_in_explorer",
            f"is true but '{engine_type}' engines cannot share the explorer's process "
            "(explorer.rollout_model.engine_type); remove it (null decides) or use engine_type: hf",
        ))
