"""The ``difficulty_based`` task selector (BOTS): pick the tasks whose pass rate is predicted
closest to a target, from a Beta belief per task.

Owns the belief and its update; the selector interface is ``selectors.TaskSelector``.
Each task i holds Beta(alpha_i, beta_i) over its pass rate under the current policy (both
start at 1). Each row also carries two precomputed features (``feature_keys``): the pass
rates of a weaker and a stronger reference model, f0_i and f1_i. After a step whose tasks I
were rolled out with observed pass rates r_I (a batch of feedback, applied before the next
selection):

    c_hat = (mean r_I - mean f0_I) / (mean f1_I - mean f0_I + 1e-6)     the policy's place
    c     = c_hat the first time, then 0.9 * c + 0.1 * c_hat            between the two models
    p~_i  = clip(f0_i + (f1_i - f0_i) * c, 0, 1); p~_i = r_i for i in I  (prior guess)
    s_i, f_i = m * r_i, m * (1 - r_i) for i in I, else 0                (pseudo counts)
    alpha_i <- (1 - lamb) * alpha_i + lamb + (1 - rho) * s_i + rho * m * p~_i
    beta_i  <- (1 - lamb) * beta_i  + lamb + (1 - rho) * f_i + rho * m * (1 - p~_i)

Selection scores every task by -|target_reward - p_i|, with p_i the Beta mean (or a draw
from the Beta when ``do_sample``), and takes the ``count`` best (``tau: 0``) or samples
``count`` distinct tasks with probabilities softmax(score / tau).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trivium.buffer.selectors import TASK_SELECTORS, TaskSelector
from trivium.errors import UserError

# How much of the previous capability estimate c survives each update.
CAPABILITY_MEMORY = 0.9


@TASK_SELECTORS.register("difficulty_based")
class DifficultyBasedSelector(TaskSelector):
    # build_selector hands this selector the rows' feature_keys columns.
    uses_feature_keys = True
    learns_from_pass_rate = True

    def __init__(
        self,
        num_tasks: int,
        seed: int | None = None,
        *,
        features: np.ndarray,
        m: int = 16,
        lamb: float = 0.2,
        rho: float = 0.2,
        target_reward: float = 0.5,
        tau: float = 0.0,
        do_sample: bool = False,
    ):
        super().__init__(num_tasks, seed)
        features = np.asarray(features, dtype=float)
        if features.shape != (num_tasks, 2):
            raise UserError(
                "task_selector.feature_keys: difficulty_based needs two columns (the pass rates of a weaker and "
                f"a stronger reference model), got features of shape {features.shape}"
            )
        for name, value in (("lamb", lamb), ("rho", rho), ("target_reward", target_reward)):
            if not 0.0 <= value <= 1.0:
                raise UserError(f"task_selector.args.{name} must lie in [0, 1], got {value}")
        if m <= 0 or tau < 0:
            raise UserError(f"task_selector.args: m must be > 0 and tau >= 0, got m={m}, tau={tau}")
        self.features = features  # (N, 2)
        self.m, self.lamb, self.rho = float(m), float(lamb), float(rho)
        self.target_reward, self.tau, self.do_sample = float(target_reward), float(tau), bool(do_sample)
        self.alphas = np.ones(num_tasks)
        self.betas = np.ones(num_tasks)
        self.capability: float | None = None
        self.pending: dict[int, float] = {}  # feedback of the last step, applied at the next select
        self._rng = np.random.default_rng(self.seed)

    # ---- feedback --------------------------------------------------------------------
    def update(self, index: int, pass_rate: float) -> None:
        if not 0 <= index < self.num_tasks:
            raise IndexError(f"task index {index} is outside the taskset (0..{self.num_tasks - 1})")
        if np.isfinite(pass_rate):
            self.pending[index] = float(pass_rate)

    def apply_feedback(self) -> None:
        """One update of every task's belief from the pending feedback (the formulas above)."""
        if not self.pending:
            return
        indices = np.fromiter(self.pending, dtype=int)
        rates = np.fromiter(self.pending.values(), dtype=float)
        self.pending = {}
        weak, strong = self.features[:, 0], self.features[:, 1]
        # c_hat = (mean r_I - mean f0_I) / (mean f1_I - mean f0_I + 1e-6)
        estimate = (rates.mean() - weak[indices].mean()) / (
            strong[indices].mean() - weak[indices].mean() + 1e-6
        )
        if self.capability is None:
            self.capability = float(estimate)
        else:
            self.capability = CAPABILITY_MEMORY * self.capability + (1 - CAPABILITY_MEMORY) * float(estimate)
        # p~ = clip(f0 + (f1 - f0) * c, 0, 1), the observed rate where there is one
        prior = np.clip(weak + (strong - weak) * self.capability, 0.0, 1.0)
        prior[indices] = rates
        successes, failures = np.zeros(self.num_tasks), np.zeros(self.num_tasks)
        successes[indices], failures[indices] = self.m * rates, self.m * (1 - rates)
        keep = 1 - self.lamb
        self.alphas = keep * self.alphas + self.lamb + (1 - self.rho) * successes + self.rho * self.m * prior
        self.betas = (
            keep * self.betas + self.lamb + (1 - self.rho) * failures + self.rho * self.m * (1 - prior)
        )

    # ---- selection -------------------------------------------------------------------
    def predicted_pass_rates(self) -> np.ndarray:
        """(N,) the Beta means, or one draw from each Beta when ``do_sample``."""
        if self.do_sample:
            return self._rng.beta(self.alphas, self.betas)
        return self.alphas / (self.alphas + self.betas)

    def select(self, position: int, count: int) -> list[int]:
        if count > self.num_tasks:
            raise UserError(
                f"difficulty_based picks distinct tasks: a batch of {count} exceeds the taskset's {self.num_tasks} rows"
            )
        self.apply_feedback()
        # score_i = -|target - p_i|
        scores = -np.abs(self.target_reward - self.predicted_pass_rates())
        if self.tau == 0:
            # the count best; ties go to the lower index
            return [int(i) for i in np.argsort(-scores, kind="stable")[:count]]
        logits = scores / self.tau
        probabilities = np.exp(logits - logits.max())
        probabilities /= probabilities.sum()
        return [int(i) for i in self._rng.choice(self.num_tasks, size=count, replace=False, p=probabilities)]

    # ---- resuming --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "alphas": self.alphas.tolist(),
            "betas": self.betas.tolist(),
            "capability": self.capability,
            "pending": {str(k): v for k, v in self.pending.items()},
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "alphas" in state:
            self.alphas = np.asarray(state["alphas"], dtype=float)
            self.betas = np.asarray(state["betas"], dtype=float)
        self.capability = state.get("capability")
        self.pending = {int(k): float(v) for k, v in state.get("pending", {}).items()}
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]
