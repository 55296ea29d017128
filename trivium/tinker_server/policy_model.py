"""One model the server trains or samples: a base model, LoRA or full weights, its optimizer.

Owns loading a base model directory, wrapping it with a LoRA adapter through peft (the
rank, seed and layer groups of the SDK's ``LoraConfig``; alpha is fixed at ``LORA_ALPHA``)
or training every weight when no LoRA config is given; the per-token logprobs of target
tokens; the AdamW step with the hyperparameters of each request; snapshots of the trained
weights (what a sampler samples from); and saving and loading them, with or without the
optimizer state, in a checkpoint directory.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from trivium.algorithm.logprobs import logprobs_from_logits
from trivium.errors import UserError
from trivium.trainer.lora import wrap_with_lora
from trivium.trainer.optim import build_optimizer
from trivium.trainer.settings import LoRASettings

LORA_ALPHA = 32.0
# The SDK's layer groups, as the module names of Llama/Qwen/Mistral-style decoders.
LAYER_GROUPS = {
    "train_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "train_mlp": ("gate_proj", "up_proj", "down_proj"),
    "train_unembed": ("lm_head",),
}
META_FILE, WEIGHTS_FILE, OPTIMIZER_FILE = "checkpoint.json", "weights.pt", "optimizer.pt"


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    seed: int | None = None
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True

    def target_modules(self) -> tuple[str, ...]:
        return tuple(name for group, names in LAYER_GROUPS.items() if getattr(self, group) for name in names)


class PolicyModel:
    """A base model with its trainable part (a LoRA adapter or every weight) and an AdamW optimizer."""

    def __init__(self, base_model: str, base_path: str, lora: LoraSpec | None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.base_model, self.base_path, self.lora = base_model, base_path, lora
        self.tokenizer = AutoTokenizer.from_pretrained(base_path)
        model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
        if lora is not None:
            if lora.rank < 1:
                raise UserError(f"lora_config.rank must be at least 1, got {lora.rank}")
            targets = lora.target_modules()
            if not targets:
                raise UserError("lora_config trains nothing: set train_attn, train_mlp or train_unembed")
            if lora.seed is not None:
                torch.manual_seed(lora.seed)
            settings = LoRASettings(rank=lora.rank, alpha=LORA_ALPHA, target_modules=targets)
            model = wrap_with_lora(model, settings)
        self.model = model.eval()
        self.optimizer: torch.optim.AdamW | None = None
        self.steps = 0

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    def trainable_parameters(self) -> dict[str, torch.nn.Parameter]:
        return {
            name: parameter for name, parameter in self.model.named_parameters() if parameter.requires_grad
        }

    # ------------------------------------------------------------------ forward
    def target_logprobs(
        self, token_rows: list[list[int]], target_rows: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log p(target_t | tokens_<=t) (B, T), mask (B, T)) for right-padded rows; with grad when enabled."""
        lengths = [len(row) for row in token_rows]
        width = max(lengths)
        input_ids = torch.zeros(len(token_rows), width, dtype=torch.long)
        targets = torch.zeros_like(input_ids)
        mask = torch.zeros(len(token_rows), width, dtype=torch.bool)
        for row, (tokens, target) in enumerate(zip(token_rows, target_rows)):
            input_ids[row, : len(tokens)] = torch.tensor(tokens)
            targets[row, : len(target)] = torch.tensor(target)
            mask[row, : len(tokens)] = True
        logits = self.model(input_ids=input_ids, attention_mask=mask.long(), use_cache=False).logits
        return logprobs_from_logits(logits, targets) * mask, mask

    # ---------------------------------------------------------------- optimizer
    def optim_step(
        self,
        *,
        learning_rate: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        grad_clip_norm: float,
    ) -> dict[str, float]:
        """One AdamW step on the accumulated gradients with these hyperparameters; the gradients are then cleared."""
        parameters = list(self.trainable_parameters().values())
        if self.optimizer is None:
            self.optimizer = build_optimizer(
                parameters, lr=learning_rate, weight_decay=weight_decay, betas=(beta1, beta2), eps=eps
            )
        for group in self.optimizer.param_groups:
            group.update(lr=learning_rate, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        gradients = [parameter.grad for parameter in parameters if parameter.grad is not None]
        grad_norm = (
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gradients]))
            if gradients
            else torch.tensor(0.0)
        )
        if grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(parameters, grad_clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return {"grad_norm:mean": float(grad_norm), "learning_rate:mean": learning_rate}

    # ---------------------------------------------------------------- snapshots
    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the trainable weights (the adapter's, or every weight)."""
        return {name: parameter.detach().clone() for name, parameter in self.trainable_parameters().items()}

    def load_snapshot(self, weights: dict[str, torch.Tensor]) -> None:
        parameters = self.trainable_parameters()
        if set(weights) != set(parameters):
            raise UserError(
                "the checkpoint's weights do not match this model's trainable parameters "
                "(a different base model or LoRA configuration)"
            )
        with torch.no_grad():
            for name, parameter in parameters.items():
                parameter.copy_(weights[name])

    @contextmanager
    def weights_swapped(self, weights: dict[str, torch.Tensor] | None):
        """The model with ``weights`` loaded for the block, its own restored after (None: its own)."""
        if weights is None:
            yield self
            return
        own = self.snapshot()
        self.load_snapshot(weights)
        try:
            yield self
        finally:
            self.load_snapshot(own)

    # --------------------------------------------------------------- checkpoints
    def save(
        self, directory: Path, *, with_optimizer: bool, weights: dict[str, torch.Tensor] | None = None
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "base_model": self.base_model,
            "lora": asdict(self.lora) if self.lora else None,
            "steps": self.steps,
        }
        torch.save(weights if weights is not None else self.snapshot(), directory / WEIGHTS_FILE)
        if with_optimizer and self.optimizer is not None:
            torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        (directory / META_FILE).write_text(json.dumps(meta, indent=1))

    def load(self, directory: Path, *, with_optimizer: bool) -> None:
        self.load_snapshot(torch.load(directory / WEIGHTS_FILE, weights_only=True))
        self.optimizer = None
        if with_optimizer and (directory / OPTIMIZER_FILE).exists():
            parameters = list(self.trainable_parameters().values())
            self.optimizer = build_optimizer(parameters, lr=1e-4, weight_decay=0.0)
            self.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=True))
        for parameter in self.trainable_parameters().values():
            parameter.grad = None


def read_checkpoint_meta(directory: Path) -> tuple[str, LoraSpec | None]:
    """(base model name, LoRA spec or None) of a checkpoint directory."""
    if not (directory / META_FILE).is_file():
        raise UserError(f"no checkpoint at {directory}")
    meta = json.loads((directory / META_FILE).read_text())
    return meta["base_model"], LoraSpec(**meta["lora"]) if meta.get("lora") else None
