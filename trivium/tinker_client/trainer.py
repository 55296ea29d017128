"""The trainer of a run with ``model.tinker.enable``: the weights train on a Tinker service.

Each step sends the batch's sequences to the service's ``forward_backward_custom``: the
service returns the logprobs of every token, trivium computes its own objective on them
(``trainer/policy_objective.py``: the configured policy loss, KL loss and their metrics,
exactly as the local trainer does), and the SDK sends the objective's gradient with
respect to those logprobs back for the service's backward pass. ``optim_step`` then applies
Adam with the learning rate of trivium's schedule. The advantages come with the
experiences (the explorer computes group advantages), the old logprobs are the update's
own (one epoch) or those of its first pass (several), or the rollout's
(``old_logprobs_source: engine``), and the reference logprobs of a KL loss come from a
sampling client of the base model.

Weights reach the ``tinker`` rollout engine as sampler paths (``publish_sampler``), and
checkpoints record the service's paths (``checkpoints.py``); a resume continues from the
service's copy of the last one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience
from trivium.core.keyword_fields import keyword_fields
from trivium.core.metric_names import UPDATE_SKIPPED
from trivium.errors import UserError
from trivium.tinker_client import checkpoints
from trivium.tinker_client.connection import call, service_client, submit, wait
from trivium.tinker_client.datums import experience_datums, response_grid
from trivium.trainer.micro_batch import loss_scale
from trivium.trainer.optim import lr_lambda
from trivium.trainer.policy_objective import PolicyObjective
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.staleness import control_staleness
from trivium.trainer.trainer_base import TrainerBase


class TinkerTrainer(TrainerBase):
    # Trait: weights are published as service sampler paths, never staged as tensors.
    publishes_sampler_weights = True

    def __init__(self, settings: TrainerSettings, *, rank_launcher: Any = None, **built_with: Any):
        """``built_with``: ``TrainerBase``'s arguments. ``rank_launcher`` is not used: the service
        runs the model, so there are no ranks here."""
        if settings.tinker is None:
            raise ValueError("TinkerTrainer needs settings.tinker")
        super().__init__(settings, **built_with)
        self.tinker = settings.tinker
        self.timeout = self.tinker.request_timeout
        self.objective = PolicyObjective(settings.loss, settings.learns_from_rollouts)
        self.lr_factor = lr_lambda(
            scheduler_type=settings.lr_scheduler_type,
            total_steps=settings.total_steps,
            warmup_ratio=settings.lr_warmup_steps_ratio,
            warmup_steps=settings.lr_warmup_steps,
            min_lr_ratio=settings.min_lr_ratio,
        )
        self.sampler_path: str | None = None
        self.sampler_version: int | None = None
        self.saved_state: tuple[int, str] | None = None  # (step, tinker:// path) of the last save_state
        self.service = service_client()
        self.client = self._new_training_client()
        self._reference: Any = None

    # ------------------------------------------------------------------ service clients
    def _new_training_client(self, state_path: str | None = None) -> Any:
        t = self.tinker
        if state_path is not None:
            return call(
                lambda: self.service.create_training_client_from_state_with_optimizer(state_path),
                f"restoring the training state {state_path}",
                self.timeout,
            )
        return call(
            # The LoRA settings are named as the client's arguments; the other two are trivium's own.
            lambda: self.service.create_lora_training_client(
                **keyword_fields(t, leave_out=("request_timeout", "name_prefix"))
            ),
            f"creating a LoRA training client of {t.base_model!r} (rank {t.rank})",
            self.timeout,
        )

    @property
    def reference(self) -> Any:
        """A sampling client of the base model: the reference policy of a KL loss."""
        if self._reference is None:
            self._reference = call(
                lambda: self.service.create_sampling_client(base_model=self.tinker.base_model),
                "creating the reference model's sampling client",
                self.timeout,
            )
        return self._reference

    # ------------------------------------------------------------------ training
    @property
    def model_version(self) -> int:
        return self.global_step

    @property
    def learns_from_rollouts(self) -> bool:
        return self.settings.learns_from_rollouts

    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        if self.learns_from_rollouts:
            experiences, metrics = control_staleness(
                experiences,
                global_step=self.global_step,
                limit=self.settings.staleness_limit,
                mode=self.settings.staleness_mode,
            )
        if not experiences:
            return {"trainer/skipped_empty_batch": 1.0, **metrics}
        batch = ExperienceBatch.from_experiences(
            experiences, self.pad_token_id, train_truncated_episodes=self.settings.truncation == "keep"
        )
        self._check_advantages(experiences, batch)
        ref_logprobs = (
            self._reference_logprobs(experiences, batch) if self.settings.loss.needs_reference else None
        )
        lr = self.settings.lr * self.lr_factor(self.global_step)
        metrics.update(self._update(experiences, batch, ref_logprobs, lr))
        self.global_step += 1
        elapsed = time.perf_counter() - start
        metrics.update(
            {
                UPDATE_SKIPPED: 0.0,
                "actor/lr": lr,
                "trainer/step": float(self.global_step),
                "time/train_step": elapsed,
                "time/throughput_train_tokens_per_s": batch.num_tokens / elapsed if elapsed > 0 else 0.0,
                "trainer/batch_size": float(batch.batch_size),
                "response_length/mean": float(batch.response_mask.sum(dim=1).mean()),
            }
        )
        if self.learns_from_rollouts:
            metrics["reward/mean"] = float(batch.rewards.mean())
        return metrics

    def _update(
        self,
        experiences: list[Experience],
        batch: ExperienceBatch,
        ref_logprobs: torch.Tensor | None,
        lr: float,
    ) -> dict[str, float]:
        """``ppo_epochs`` forward/backward passes on the service, each followed by an optimizer step;
        the objective's metrics averaged over the epochs."""
        datums = experience_datums(experiences)
        epochs = self.settings.ppo_epochs
        first_pass: list[torch.Tensor] = []  # the logprobs before any update of this step
        totals: dict[str, float] = {}
        for _ in range(epochs):
            captured: dict[str, float] = {}

            def objective(
                _data: list, sequence_logprobs: list[torch.Tensor], captured: dict[str, float] = captured
            ) -> tuple[torch.Tensor, dict[str, float]]:
                logprobs = response_grid(experiences, sequence_logprobs, batch.response_length)
                if not first_pass:
                    first_pass.append(logprobs.detach())
                terms = self.objective.terms(
                    batch,
                    logprobs=logprobs,
                    old_logprobs=self._old_logprobs(batch, logprobs, first_pass[0]),
                    advantages=batch.advantages,
                    ref_logprobs=ref_logprobs,
                    global_step=self.global_step,
                )
                captured.update(terms.metrics)
                policy_weight = loss_scale(batch, batch, self.objective.policy_agg_mode)
                weight = loss_scale(batch, batch, self.settings.loss.loss_agg_mode)
                return terms.policy_loss * policy_weight + terms.other_terms * weight, {}

            # Both requests go out before either is awaited: the service runs them back to back.
            step_name = f"step {self.global_step + 1}"
            backward, step = submit(
                lambda: (
                    self.client.forward_backward_custom(datums, objective),
                    self.client.optim_step(self._adam(lr)),
                ),
                f"sending {step_name}",
                self.timeout,
            )
            wait(backward, f"the forward/backward pass of {step_name}", self.timeout)
            wait(step, f"the optimizer step of {step_name}", self.timeout)
            for key, value in captured.items():
                totals[key] = totals.get(key, 0.0) + value / epochs
        return totals

    def _adam(self, lr: float) -> Any:
        from tinker import types

        beta1, beta2 = self.settings.betas
        return types.AdamParams(
            learning_rate=lr,
            beta1=beta1,
            beta2=beta2,
            weight_decay=self.settings.weight_decay,
            grad_clip_norm=self.settings.grad_clip or 0.0,
        )

    def _old_logprobs(
        self, batch: ExperienceBatch, current: torch.Tensor, first_pass: torch.Tensor
    ) -> torch.Tensor:
        """The behaviour policy of the ratio: the rollout's logprobs, or the weights before this update."""
        if self.settings.old_logprobs_source == "engine":
            return batch.old_logprobs
        # One epoch: the update's own logprobs, detached (ratio 1); several: those of the first pass.
        return current.detach() if self.settings.ppo_epochs == 1 else first_pass

    def _check_advantages(self, experiences: list[Experience], batch: ExperienceBatch) -> None:
        if self.settings.loss.advantage_fn is None:
            batch.advantages = torch.zeros_like(batch.response_mask)
            return
        missing = sum(e.advantages is None for e in experiences)
        if missing:
            raise UserError(
                f"{missing} of {len(experiences)} experiences came without advantages; with model.tinker.enable "
                "the explorer computes them (group-based algorithms such as grpo), as the trainer has no model here"
            )

    def _reference_logprobs(self, experiences: list[Experience], batch: ExperienceBatch) -> torch.Tensor:
        from tinker import types

        inputs = [types.ModelInput.from_ints(e.tokens.tolist()) for e in experiences]
        reference = self.reference
        futures = submit(
            lambda: [reference.compute_logprobs(i) for i in inputs], "the reference logprobs", self.timeout
        )
        grid = torch.zeros_like(batch.response_mask, dtype=torch.float32)
        for row, (e, future) in enumerate(zip(experiences, futures)):
            scored = wait(future, "the reference model's logprobs", self.timeout)[e.prompt_length :]
            grid[row, : e.response_length] = torch.tensor([float(v) for v in scored], dtype=torch.float32)
        return grid

    def probe_logprobs(self, probes: list[Experience]) -> list[torch.Tensor]:
        """Response logprobs of a few experiences under the current weights (the sync self-check)."""
        datums = experience_datums(probes)
        output = call(lambda: self.client.forward(datums, "cross_entropy"), "scoring probes", self.timeout)
        scored = [torch.tensor(out["logprobs"].data, dtype=torch.float32) for out in output.loss_fn_outputs]
        grid = response_grid(probes, scored, max(e.response_length for e in probes))
        return [grid[row, : e.response_length] for row, e in enumerate(probes)]

    # ------------------------------------------------------------------ weights
    def publish_sampler(self, version: int) -> str:
        """Save the current weights for sampling; returns their ``tinker://`` path."""
        name = f"{self.tinker.name_prefix}-v{version:06d}"
        saved = call(
            lambda: self.client.save_weights_for_sampler(name), f"saving sampler weights {name}", self.timeout
        )
        self.sampler_path, self.sampler_version = saved.path, version
        return saved.path

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, *, export_hf: bool, extra_files: dict[str, dict] | None = None) -> Path:
        if export_hf:
            raise UserError(
                "trainer.save_hf_checkpoint: a Tinker run's weights stay on the service; its checkpoints record "
                "their tinker:// paths. Set save_hf_checkpoint: never"
            )
        if self.sampler_version != self.model_version:
            self.publish_sampler(self.model_version)  # a resumed explorer samples exactly these weights
        if self.saved_state is None or self.saved_state[0] != self.global_step:  # a final save may repeat one
            name = f"{self.tinker.name_prefix}-step{self.global_step:06d}"
            saved = call(
                lambda: self.client.save_state(name), f"saving the training state {name}", self.timeout
            )
            self.saved_state = (self.global_step, saved.path)
        state = {
            "state_path": self.saved_state[1],
            "sampler_path": self.sampler_path,
            "base_model": self.tinker.base_model,
            "rank": self.tinker.rank,
        }
        return checkpoints.save_service_checkpoint(
            self.run_dir,
            self.global_step,
            service_state=state,
            trainer_state={"model_version": self.model_version},
            tokenizer=self.tokenizer,
            extra_files=extra_files,
        )

    def load_checkpoint(self, step: int) -> None:
        state = checkpoints.load_service_state(self.run_dir, step)
        for key, now in (("base_model", self.tinker.base_model), ("rank", self.tinker.rank)):
            if state.get(key) is not None and state[key] != now:
                setting = "model.tinker.base_model" if key == "base_model" else "model.tinker.rank"
                raise UserError(
                    f"checkpoint global_step_{step} was trained with {setting}={state[key]!r}; the config now says "
                    f"{now!r}. Resume with the same value, or start a new run"
                )
        self.client = self._new_training_client(state["state_path"])
        self.sampler_path = state.get("sampler_path")
        self.global_step = step
        self.sampler_version = step if self.sampler_path else None

    def close(self) -> None:
        """The service keeps the weights and checkpoints; nothing to release here."""
