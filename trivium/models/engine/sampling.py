"""Vectorised next-token sampling for a whole batch, one call per decoding step.

Owns the logits processing (repetition penalty, min-token stop suppression, temperature,
top-k, top-p) with per-row parameters, and the draw itself. Knows nothing about models or
caches. Every function works on ``(B, V)`` float32 logits.

The logprob returned for a sampled token is log-softmax of the RAW logits (temperature 1,
before any processing): the quantity the trainer recomputes from the same weights. With a
``kept_set_cap`` (sampling-mask replay, ``sampling_mask.py``) it is instead the logprob under
the truncated, renormalised distribution at the row's temperature, and each step's kept sets
are left in ``step_kept``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trivium.errors import UserError
from trivium.models.engine.base import SamplingParams
from trivium.models.engine.sampling_mask import kept_set_step

NEG_INF = float("-inf")


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise tokens already in the sequence (prompt included).

    logits, seen: (B, V); penalty: (B, 1). A seen token's logit l becomes l / p if l > 0 else l * p,
    so p > 1 always makes it less likely.
    """
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf every token outside each row's top-k, then outside its top-p nucleus.

    logits: (B, V) already temperature-scaled; top_k: (B, 1) int (V = disabled);
    top_p: (B, 1) float (1 = disabled). The nucleus is the smallest set of most likely tokens
    whose probability (renormalised after top-k) reaches top_p; the top token is always kept.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    rank = torch.arange(logits.shape[-1], device=logits.device)
    sorted_logits = sorted_logits.masked_fill(rank >= top_k, NEG_INF)
    sorted_probs = sorted_logits.softmax(dim=-1)
    # Probability mass strictly before each token; a token is dropped once that mass reaches top_p.
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_logits = sorted_logits.masked_fill((mass_before >= top_p) & (rank > 0), NEG_INF)
    return torch.full_like(logits, NEG_INF).scatter_(-1, order, sorted_logits)


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from (B, V) probabilities by inverting the CDF.

    Needs one uniform number per row (drawing V exponentials per row, as the Gumbel trick
    does, costs ~25x more on CPU). ``right=True`` never lands on a zero-probability token.
    """
    cdf = probs.cumsum(dim=-1)
    uniform = torch.rand(probs.shape[0], 1, generator=generator, dtype=cdf.dtype, device=cdf.device)
    return (
        torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)
    )


class BatchSampler:
    """Per-row sampling state for one generation batch; rows can be dropped as they finish."""

    def __init__(
        self,
        params: Sequence[SamplingParams],
        stop_token_ids: Sequence[Sequence[int]],
        vocab_size: int,
        kept_set_cap: int | None = None,
    ):
        self.vocab_size = vocab_size
        self.kept_set_cap = kept_set_cap
        self.step_kept: tuple[torch.Tensor, torch.Tensor] | None = None
        rows = len(params)
        self.temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32).view(rows, 1)
        self.greedy = self.temperature.view(-1) == 0
        self.all_greedy = bool(self.greedy.all())
        self.any_greedy = bool(self.greedy.any())
        # Greedy rows divide by 1 so the shared sampling path stays finite; their draw is replaced.
        self.temperature = torch.where(
            self.temperature == 0, torch.ones_like(self.temperature), self.temperature
        )
        self.any_temperature = bool((self.temperature != 1).any())
        top_k = [p.top_k if 0 < p.top_k < vocab_size else vocab_size for p in params]
        self.top_k = torch.tensor(top_k, dtype=torch.long).view(rows, 1)
        self.top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32).view(rows, 1)
        self.any_filter = bool((self.top_k < vocab_size).any() or (self.top_p < 1).any())
        self.penalty = torch.tensor([p.repetition_penalty for p in params], dtype=torch.float32).view(rows, 1)
        self.any_penalty = bool((self.penalty != 1).any())
        self.min_tokens = torch.tensor([p.min_tokens for p in params], dtype=torch.long)
        self.max_min_tokens = int(self.min_tokens.max()) if rows else 0
        # Dropping rows can only raise the true minimum, so this stays a safe lower bound.
        self.min_min_tokens = int(self.min_tokens.min()) if rows else 0
        # Stop ids padded to a rectangle with -1, which matches no token.
        width = max((len(s) for s in stop_token_ids), default=0)
        stops = [list(s) + [-1] * (width - len(s)) for s in stop_token_ids]
        self.stop_ids = torch.tensor(stops, dtype=torch.long).view(rows, width)
        # (B, V) bool: each row's stop ids, built once; used while a row is below min_tokens.
        self.stop_mask = stop_token_mask(self.stop_ids, vocab_size)
        # No processing besides stop blocking: sample straight from the raw distribution.
        self.plain = not (self.any_greedy or self.any_penalty or self.any_temperature or self.any_filter)
        if kept_set_cap is not None:
            if self.any_penalty:
                raise UserError(
                    "sampling-mask replay (trainer.replay_sampling_mask) cannot record sampling with a "
                    "repetition_penalty: the penalised logits are not the model's; remove the penalty"
                )
            self.plain = False
            self.truncates = ((self.top_k < vocab_size) | (self.top_p < 1)).view(-1)

    def keep_rows(self, index: torch.Tensor) -> None:
        for name in (
            "temperature",
            "greedy",
            "top_k",
            "top_p",
            "penalty",
            "min_tokens",
            "stop_ids",
            "stop_mask",
        ):
            setattr(self, name, getattr(self, name)[index])
        if self.kept_set_cap is not None:
            self.truncates = self.truncates[index]

    def is_stop(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: the token is one of its row's stop ids."""
        if self.stop_ids.shape[1] == 0:
            return torch.zeros_like(tokens, dtype=torch.bool)
        return (self.stop_ids == tokens.unsqueeze(1)).any(dim=1)

    def sample(
        self,
        logits: torch.Tensor,
        step: int,
        seen: torch.Tensor | None,
        generator: torch.Generator | None,
        forced: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample the ``step``-th response token (0-based) of every row.

        logits: (B, V) raw; seen: (B, V) bool tokens already present (needed for repetition
        penalty); forced: (B,) int64 tokens to pick instead of drawing (a replay). Returns
        tokens (B,) int64 and their raw-logit logprobs (B,) float32.
        """
        logits = logits.float()
        raw_logprobs = logits.log_softmax(dim=-1)
        if forced is not None:
            return forced, raw_logprobs.gather(1, forced.unsqueeze(1)).squeeze(1)
        if self.any_penalty:
            logits = apply_repetition_penalty(logits, seen, self.penalty)
        blocked = None
        if step < self.max_min_tokens:
            if step < self.min_min_tokens:  # every row still below its minimum: no sync needed
                blocked = self.stop_mask
            else:
                blocked = self.stop_mask & (step < self.min_tokens).unsqueeze(1)
            if not self.plain:
                logits = logits.masked_fill(blocked, NEG_INF)
        if self.plain:
            # Temperature-1 sampling of the raw logits: the probabilities are exp(logprobs), with
            # blocked stop tokens zeroed (``draw`` renormalises), so no second softmax is needed.
            probs = raw_logprobs.exp()
            if blocked is not None:
                probs.masked_fill_(blocked, 0.0)
            tokens = draw(probs, generator)
        elif self.all_greedy:
            tokens = logits.argmax(dim=-1)
        else:
            if self.any_temperature:
                logits = logits / self.temperature
            if self.any_filter:
                logits = filter_top_k_top_p(logits, self.top_k, self.top_p)
            tokens = draw(logits.softmax(dim=-1), generator)
            if self.any_greedy:
                tokens = torch.where(self.greedy, logits.argmax(dim=-1), tokens)
        if self.kept_set_cap is not None:
            logprobs, counts, kept = kept_set_step(
                logits,
                raw_logprobs,
                tokens,
                temperature=self.temperature,
                truncates=self.truncates,
                greedy=self.greedy,
                cap=self.kept_set_cap,
            )
            self.step_kept = (counts, kept)
            return tokens, logprobs
        return tokens, raw_logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)


def stop_token_mask(stop_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, V) bool, True at each row's stop ids; stop_ids is (B, S) with -1 = none."""
    columns = torch.where(stop_ids < 0, vocab_size, stop_ids)
    mask = torch.zeros(stop_ids.shape[0], vocab_size + 1, dtype=torch.bool)
    return mask.scatter_(1, columns, True)[:, :vocab_size].contiguous()


def block_stop_tokens(logits: torch.Tensor, stop_ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """-inf at each row's stop ids for the rows (B,) bool still below their min_tokens."""
    blocked = stop_token_mask(stop_ids, logits.shape[1]) & rows.unsqueeze(1)
    return logits.masked_fill(blocked, NEG_INF)
