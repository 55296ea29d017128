"""The explorer: reads tasks, runs workflows with the current policy, writes experiences.

    explore_step = read_tasks -> run_workflows -> [greedy_baselines] -> [teacher_logprobs]
                   -> group_advantages -> experience_pipeline -> write

With over-rollout (``trivium.explorer.over_rollout``) ``run_workflows`` goes on without the
slowest tasks of the step; they are abandoned and counted (``rollout/late_tasks``).

Two steps run only when the algorithm asks: a greedy rollout of every task whose reward is
the baseline of that task's samples (remax), and a teacher model's logprobs of every sampled
response (distillation).

Evaluation runs the eval tasksets with their own repeat times and rollout args. The explorer
never trains and never touches the trainer's weights; it only loads the versions the
synchronizer hands it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Callable

import torch

from trivium.algorithm.advantages import (
    ADVANTAGE_FNS,
    computed_by_explorer,
    requires_episodes,
    requires_row_info,
    requires_sequence_logprobs,
    row_selection,
)
from trivium.buffer.base import BufferExhausted
from trivium.core.experience import Experience, episode_index, new_experience_id
from trivium.explorer.metrics import eval_metrics, rollout_metrics
from trivium.explorer.over_rollout import OverRollout, gather
from trivium.explorer.runner import (
    RunnerPool,
    UnitResult,
    raise_if_all_misconfigured,
    split_units,
    stuck_workflows,
)
from trivium.explorer.stall import StallWatch


@dataclass
class EvalSet:
    name: str
    reader: Any  # a TaskReader over the whole eval split
    make_reader: Callable[[], Any] | None = None  # fresh reader per evaluation


@dataclass
class ExplorerState:
    step: int = 0
    finished: bool = False
    failed_tasks: int = 0
    history: list[dict[str, float]] = field(default_factory=list)


class Explorer:
    def __init__(
        self,
        *,
        taskset_reader: Any,
        writer: Any,
        runner_pool: RunnerPool,
        batch_size: int,
        max_steps: int | None = None,
        eval_sets: list[EvalSet] = (),
        eval_runner_pool: RunnerPool | None = None,
        experience_pipeline: Any = None,
        advantage_fn: str | None = None,
        advantage_fn_args: dict[str, Any] | None = None,
        max_repeat_times_per_runner: int | None = None,
        over_rollout: OverRollout | None = None,
        model_version: Callable[[], int] = lambda: 0,
        logger: logging.Logger | None = None,
        max_failed_steps: int | None = 3,
        greedy_baseline: bool = False,
        teacher: Any = None,
    ):
        self.taskset_reader = taskset_reader
        self.writer = writer
        self.runner_pool = runner_pool
        self.eval_runner_pool = eval_runner_pool or runner_pool
        self.batch_size = batch_size
        self.max_steps = max_steps  # stop after this step (None: when the tasksets run out)
        self.eval_sets = list(eval_sets)
        self.experience_pipeline = experience_pipeline
        self.advantage_fn = ADVANTAGE_FNS.get(advantage_fn) if advantage_fn is not None else None
        self.group_advantages = self.advantage_fn is not None and computed_by_explorer(self.advantage_fn)
        self.greedy_baseline = greedy_baseline
        # A ModelWrapper (or engine) whose compute_logprobs scores the sampled responses.
        self.teacher = teacher
        self.advantage_fn_args = dict(advantage_fn_args or {})
        self.max_repeat_times_per_runner = max_repeat_times_per_runner
        self.over_rollout = over_rollout or OverRollout()
        self.model_version = model_version
        self.logger = logger or logging.getLogger("trivium.explorer")
        self.state = ExplorerState()
        # The position after the last step whose experiences were all written: what a
        # checkpoint records. ``state`` runs ahead of it while a step is under way.
        self._committed: dict[str, Any] = self._current_state()
        self.stall_watch = StallWatch(max_failed_steps=max_failed_steps)

    # ------------------------------------------------------------------ one step
    def explore_step(self) -> dict[str, float] | None:
        """One step; returns its metrics, or None when the taskset is exhausted or ``max_steps`` are done.

        Raises ``ExplorationStalled`` when every task has failed for ``max_failed_steps``
        steps in a row.
        """
        if self.max_steps is not None and self.state.step >= self.max_steps:
            self.state.finished = True
        if self.state.finished:
            return None
        start = time.perf_counter()
        try:
            tasks = self.taskset_reader.read(self.batch_size)
        except (BufferExhausted, StopIteration):
            tasks = []
        if not tasks:
            self.state.finished = True
            return None
        self.state.step += 1
        results, late_metrics = self.run_workflows(tasks)
        raise_if_all_misconfigured(results)
        self.stall_watch.observe(self.state.step, results)
        experiences = [exp for result in results for exp in result.experiences]
        version = self.model_version()
        for exp in experiences:
            exp.model_version = version
            exp.explore_step = self.state.step
        if self.greedy_baseline and experiences:
            self.add_greedy_baselines(tasks, experiences)
        produced = len(experiences)
        experiences, pipeline_metrics = self.prepare_for_training(experiences)
        if experiences:
            self.writer.write(experiences)
        self.state.failed_tasks += sum(not r.ok for r in results)
        self._committed = self._current_state()
        metrics = rollout_metrics(results, experiences, time.perf_counter() - start)
        metrics.update({f"pipeline/{k}": v for k, v in pipeline_metrics.items()})
        metrics.update(late_metrics)
        # Left out on purpose: by the estimator's row selection or by the experience pipeline.
        metrics["rollout/filtered_experiences"] = float(max(0, produced - len(experiences)))
        metrics["explorer/step"] = float(self.state.step)
        metrics["explorer/model_version"] = float(version)
        metrics["rollout/failed_tasks_total"] = float(self.state.failed_tasks)
        metrics["rollout/stuck_workflows"] = float(stuck_workflows())
        self.logger.info("explore step %d: %s", self.state.step, _brief(metrics))
        return metrics

    def run_workflows(self, tasks: list[Any]) -> tuple[list[UnitResult], dict[str, float]]:
        """Every task's results; with over-rollout, those finished when the step went on, and its counts."""
        units, task_of_unit = [], []  # task_of_unit[i]: the position in ``tasks`` of units[i]'s task
        for index, task in enumerate(tasks):
            for unit in split_units([task], self.max_repeat_times_per_runner):
                units.append(unit)
                task_of_unit.append(index)
        metrics: dict[str, float] = {}
        if self.runner_pool.dynamic_timeout is not None:
            metrics["rollout/dynamic_timeout"] = float(self.runner_pool.attempt_timeout() or 0.0)
        if not self.over_rollout.enabled:
            return self.runner_pool.run(units), metrics
        gathered = gather(self.runner_pool.submit(units), task_of_unit, self.over_rollout)
        self.runner_pool.abandon(gathered.late_futures)
        metrics.update({
            "rollout/late_tasks": float(gathered.late_tasks),
            "rollout/late_tasks_dropped": float(gathered.dropped_tasks),
            "rollout/late_tasks_partial": float(gathered.partial_tasks),
        })
        if gathered.late_tasks:
            self.logger.info(
                "explore step %d went on without %d late tasks (%d dropped, %d kept in part)",
                self.state.step, gathered.late_tasks, gathered.dropped_tasks, gathered.partial_tasks,
            )
        return gathered.results, metrics

    def prepare_for_training(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        """Rewarded experiences made ready for the buffer: teacher logprobs and group advantages
        when the algorithm asks, then the experience pipeline; returns them and the pipeline's metrics."""
        if self.teacher is not None and experiences:
            self.add_teacher_logprobs(experiences)
        if self.group_advantages:
            experiences = self.compute_group_advantages(experiences)
        if self.experience_pipeline is not None and experiences:
            return self.experience_pipeline.process(experiences)
        return experiences, {}

    def compute_group_advantages(self, experiences: list[Experience]) -> list[Experience]:
        """Group-based advantages need every sample of a task; a step holds whole groups.

        Returns the experiences to train on: all of them, unless the estimator selects rows
        (grpo's std_threshold drops groups, and may refill the batch with copies of others)."""
        if not experiences:
            return experiences
        group_index = {gid: i for i, gid in enumerate(dict.fromkeys(e.group_id for e in experiences))}
        rewards = torch.tensor([[float(e.reward)] for e in experiences])
        mask = torch.ones_like(rewards)
        group_ids = torch.tensor([group_index[e.group_id] for e in experiences], dtype=torch.long)
        inputs: dict[str, Any] = {"token_level_rewards": rewards, "response_mask": mask, "group_ids": group_ids}
        if requires_episodes(self.advantage_fn):
            inputs["episode_ids"] = torch.tensor(episode_index(experiences), dtype=torch.long)
        if requires_row_info(self.advantage_fn):
            inputs["row_info"] = [e.info for e in experiences]
        if requires_sequence_logprobs(self.advantage_fn) and all(e.logprobs is not None for e in experiences):
            inputs["sequence_logprobs"] = torch.stack(
                [e.logprobs.float().mean() if e.logprobs.numel() else torch.tensor(0.0) for e in experiences]
            )
        advantages, _ = self.advantage_fn(**inputs, **self.advantage_fn_args)
        for exp, advantage in zip(experiences, advantages[:, 0].tolist()):
            exp.advantages = torch.full((exp.response_length,), advantage, dtype=torch.float32)
            exp.returns = exp.advantages.clone()
        select = row_selection(self.advantage_fn)
        rows = select(**inputs, **self.advantage_fn_args) if select is not None else None
        if rows is None:
            return experiences
        kept, seen = [], set()
        for row in rows.tolist():
            # a row drawn again is a copy under a new id, so every experience id stays unique
            kept.append(replace(experiences[row], eid=new_experience_id()) if row in seen else experiences[row])
            seen.add(row)
        return kept

    def add_greedy_baselines(self, tasks: list[Any], experiences: list[Experience]) -> None:
        """One greedy (temperature 0) rollout per task; its reward becomes each sample's baseline.

        A task whose greedy rollout failed gives its samples baseline 0 (plain REINFORCE).
        """
        greedy_tasks = [
            replace(task, repeat_times=1, rollout_args={**task.rollout_args, "temperature": 0.0}) for task in tasks
        ]
        results = self.runner_pool.run(split_units(greedy_tasks, None))
        greedy_reward: dict[str, float] = {}
        for result in results:
            for exp in result.experiences:
                greedy_reward.setdefault(exp.task_id, float(exp.reward or 0.0))
        for exp in experiences:
            exp.baseline_reward = greedy_reward.get(exp.task_id, 0.0)

    def add_teacher_logprobs(self, experiences: list[Experience]) -> None:
        """The teacher's logprobs of each sampled response, token by token (one engine call)."""
        engine = getattr(self.teacher, "engine", self.teacher)
        scored = engine.compute_logprobs(
            [exp.tokens.tolist() for exp in experiences], [exp.prompt_length for exp in experiences]
        )
        for exp, logprobs in zip(experiences, scored):
            exp.teacher_logprobs = logprobs.float()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for eval_set in self.eval_sets:
            reader = eval_set.make_reader() if eval_set.make_reader else eval_set.reader
            tasks = []
            while True:
                try:
                    chunk = reader.read(max(1, self.batch_size))
                except (BufferExhausted, StopIteration):
                    break
                if not chunk:
                    break
                tasks.extend(chunk)
            start = time.perf_counter()
            results = self.eval_runner_pool.run(split_units(tasks, None))
            raise_if_all_misconfigured(results)
            metrics.update(eval_metrics(eval_set.name, results, time.perf_counter() - start))
        if metrics:
            self.logger.info("eval at step %d: %s", self.state.step, _brief(metrics))
        return metrics

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """The position after the last finished step: every experience of steps up to
        ``step`` is in the buffer, none of a later step is. Safe to call while a step runs."""
        return dict(self._committed)

    def _current_state(self) -> dict[str, Any]:
        reader_state = self.taskset_reader.state_dict() if hasattr(self.taskset_reader, "state_dict") else {}
        return {"step": self.state.step, "failed_tasks": self.state.failed_tasks, "taskset": reader_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.step = int(state.get("step", 0))
        self.state.failed_tasks = int(state.get("failed_tasks", 0))
        if state.get("taskset") and hasattr(self.taskset_reader, "load_state_dict"):
            self.taskset_reader.load_state_dict(state["taskset"])
        self._committed = self._current_state()


def _brief(metrics: dict[str, float]) -> str:
    keys = [k for k in metrics if k.endswith(("reward_mean", "accuracy", "pass_rate", "failed_tasks"))]
    return ", ".join(f"{k}={metrics[k]:.3f}" for k in keys[:8])
