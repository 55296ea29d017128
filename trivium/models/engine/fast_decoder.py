"""A hand-written decoder forward for the Llama / Qwen2 / Mistral family, for fast sampling.

On small models the cost of ``model.generate`` is Python overhead per token, not arithmetic.
This decoder runs the same math as the Hugging Face modules with far fewer calls:
  * q, k and v come out of ONE matmul, and RoPE's rotate-half is a tiny matmul with a signed
    permutation matrix (exact), so RoPE costs three ops for q and k together;
  * gate and up projections are one matmul;
  * the KV cache is preallocated (static shapes) and finished rows can be dropped;
  * a decode step attends with grouped queries, never copying K/V per head.
It reads the weights from the HF model it wraps; the fused copies are rebuilt whenever any
parameter changed in place (tracked by tensor version counters), so a trainer's
``load_state_dict`` or optimizer step is picked up on the next call.

Must not be used for models with sliding windows, per-head q/k norms or dynamic RoPE:
``unsupported_reason`` says why a model falls back to the generic path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def unsupported_reason(model) -> str | None:
    """None when the fast path can run ``model`` exactly; otherwise why not."""
    config = model.config
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {config.model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])):
        return "sliding-window attention layers"
    if config.model_type == "mistral" and getattr(config, "sliding_window", None):
        return "sliding-window attention"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) not in STATIC_ROPE_TYPES:
        return f"rope type {rope.get('rope_type')!r} depends on sequence length"
    attention = model.model.layers[0].self_attn
    if hasattr(attention, "q_norm") or hasattr(attention, "k_norm"):
        return "per-head q/k normalisation"
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if abs(getattr(attention, "scaling", head_dim**-0.5) - head_dim**-0.5) > 1e-12:
        return "attention scaling other than 1/sqrt(head_dim)"
    return None


@dataclass
class _LayerWeights:
    # Each RMSNorm's weight is folded into the columns of the matmul that follows it
    # (W @ (w * n) == (W * w) @ n), so the norms run without a weight.
    qkv_weight: torch.Tensor  # rows: q, k, v
    qkv_bias: torch.Tensor | None
    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up_weight: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down_weight: torch.Tensor
    down_bias: torch.Tensor | None


def rotate_half_matrix(head_dim: int, dtype: torch.dtype, device) -> torch.Tensor:
    """R with x @ R == rotate_half(x) == cat(-x[half:], x[:half]); entries are 0 and +-1, so exact."""
    half = head_dim // 2
    matrix = torch.zeros(head_dim, head_dim, dtype=dtype, device=device)
    index = torch.arange(half, device=device)
    matrix[index + half, index] = -1.0
    matrix[index, index + half] = 1.0
    return matrix


def _cat_bias(parts: list[torch.Tensor | None], sizes: list[int], like: torch.Tensor) -> torch.Tensor | None:
    if all(p is None for p in parts):
        return None
    return torch.cat([p if p is not None else like.new_zeros(n) for p, n in zip(parts, sizes)])


def _add_linear(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """residual + x @ W.T (+ b) for 2-D inputs, with the residual add fused into the matmul."""
    out = torch.addmm(residual, x, weight.t())
    return out if bias is None else out.add_(bias)


class FastDecoder:
    """Prefill + single-token decode over a static KV cache, for one batch at a time."""

    def __init__(self, model):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"fast decoder cannot run this model: {reason}")
        self.model = model
        config = model.config
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.eps = config.rms_norm_eps
        self.act = ACT2FN[config.hidden_act]
        self.rotary = model.model.rotary_emb
        self._weights_stamp = None
        self._rope_cos = self._rope_sin = None
        self.caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.key_bias: torch.Tensor | None = None
        self.length = 0

    # ---- weights -------------------------------------------------------------------------

    def _stamp(self) -> tuple:
        # Version counters rise on every in-place write (load_state_dict, optimizer.step).
        return tuple((id(p), p._version) for p in self.model.parameters())

    def bind_weights(self) -> None:
        """(Re)build the fused weights if any parameter changed since the last build."""
        stamp = self._stamp()
        if stamp == self._weights_stamp:
            return
        with torch.no_grad():
            self.layers = [self._fuse_layer(layer) for layer in self.model.model.layers]
            self.embed = self.model.model.embed_tokens.weight
            self.lm_head = self.model.lm_head.weight * self.model.model.norm.weight
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self.rotate_half = rotate_half_matrix(self.head_dim, self.dtype, self.device)
        self._rope_cos = self._rope_sin = None
        self._weights_stamp = stamp

    def _fuse_layer(self, layer) -> _LayerWeights:
        attention, mlp = layer.self_attn, layer.mlp
        q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
        qkv_weight = torch.cat([q.weight, k.weight, v.weight]) * layer.input_layernorm.weight
        qkv_bias = _cat_bias(
            [q.bias, k.bias, v.bias], [q.out_features, k.out_features, v.out_features], q.weight
        )
        gate, up = mlp.gate_proj, mlp.up_proj
        return _LayerWeights(
            qkv_weight=qkv_weight,
            qkv_bias=qkv_bias,
            o_weight=attention.o_proj.weight,
            o_bias=attention.o_proj.bias,
            gate_up_weight=torch.cat([gate.weight, up.weight]) * layer.post_attention_layernorm.weight,
            gate_up_bias=_cat_bias([gate.bias, up.bias], [gate.out_features, up.out_features], gate.weight),
            down_weight=mlp.down_proj.weight,
            down_bias=mlp.down_proj.bias,
        )

    def _rope_tables(self, positions_needed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin of shape (positions, head_dim), grown on demand; same formula as the HF rotary module."""
        if self._rope_cos is None or self._rope_cos.shape[0] < positions_needed:
            size = max(positions_needed, 256)
            inv_freq = self.rotary.inv_freq.to(device=self.device, dtype=torch.float32)
            freqs = torch.arange(size, device=self.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
            angles = torch.cat((freqs, freqs), dim=-1)
            scale = float(getattr(self.rotary, "attention_scaling", 1.0))
            self._rope_cos = (angles.cos() * scale).to(self.dtype)
            self._rope_sin = (angles.sin() * scale).to(self.dtype)
        return self._rope_cos, self._rope_sin

    # ---- forward -------------------------------------------------------------------------

    def _project_qkv(self, x: torch.Tensor, weights: _LayerWeights, cos: torch.Tensor, sin: torch.Tensor):
        """x: (..., hidden) -> roped q (..., H, D), roped k (..., KV, D), v (..., KV, D)."""
        h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        fused = F.linear(x, weights.qkv_weight, weights.qkv_bias)
        qk = fused[..., : (h + kv) * d].unflatten(-1, (h + kv, d))
        v = fused[..., (h + kv) * d :].unflatten(-1, (kv, d))
        # RoPE on q and k heads at once: x * cos + rotate_half(x) * sin.
        rotated = (qk.reshape(-1, d) @ self.rotate_half).view(qk.shape)  # one mm, not a batched matmul
        qk = torch.addcmul(qk * cos, rotated, sin)
        return qk[..., :h, :], qk[..., h:, :], v

    def _mlp_hidden(self, x: torch.Tensor, weights: _LayerWeights) -> torch.Tensor:
        gate, up = F.linear(self._norm(x), weights.gate_up_weight, weights.gate_up_bias).chunk(2, dim=-1)
        return self.act(gate) * up

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self._norm(x), self.lm_head).float()

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, x.shape[-1:], None, self.eps)

    @torch.inference_mode()
    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, capacity: int
    ) -> torch.Tensor:
        """Run left-padded prompts (B, P); allocate a cache for ``capacity`` positions.

        Returns float32 logits (B, V) of the last prompt position.
        """
        self.bind_weights()
        batch, prompt_len = input_ids.shape
        cos_table, sin_table = self._rope_tables(int(position_ids.max()) + capacity)
        cos, sin = cos_table[position_ids].unsqueeze(2), sin_table[position_ids].unsqueeze(2)  # (B, P, 1, D)
        key_valid = attention_mask.bool()
        # Additive mask over cache positions, (B, 1, 1, capacity): 0 = attend, -inf = padding or
        # not yet written. Decode steps open one column each and pass a view, no conversion.
        self.key_bias = torch.full(
            (batch, 1, 1, capacity), float("-inf"), dtype=self.dtype, device=self.device
        )
        self.key_bias[:, 0, 0, :prompt_len].masked_fill_(key_valid, 0.0)
        causal = torch.ones(prompt_len, prompt_len, dtype=torch.bool, device=self.device).tril()
        # Padding queries see only themselves, so no softmax row is empty (their output is unused).
        mask = (causal & key_valid[:, None, :]) | torch.eye(prompt_len, dtype=torch.bool, device=self.device)
        mask = mask.unsqueeze(1)  # (B, 1, P, P)
        shape = (batch, self.num_kv_heads, capacity, self.head_dim)
        self.caches = []
        x = self.embed[input_ids]
        for weights in self.layers:
            normed = self._norm(x)
            q, k, v = self._project_qkv(normed, weights, cos, sin)
            k_cache = torch.empty(shape, dtype=self.dtype, device=self.device)
            v_cache = torch.empty(shape, dtype=self.dtype, device=self.device)
            k_cache[:, :, :prompt_len] = k.transpose(1, 2)
            v_cache[:, :, :prompt_len] = v.transpose(1, 2)
            self.caches.append((k_cache, v_cache))
            attended = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, enable_gqa=True
            )
            x = x + F.linear(attended.transpose(1, 2).flatten(2), weights.o_weight, weights.o_bias)
            x = x + F.linear(self._mlp_hidden(x, weights), weights.down_weight, weights.down_bias)
        self.length = prompt_len
        return self._logits(x[:, -1])

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row (B,) at positions (B,); returns float32 logits (B, V)."""
        batch = tokens.shape[0]
        t = self.length
        cos_table, sin_table = self._rope_tables(int(position_ids.max()) + 1)
        cos, sin = cos_table[position_ids].unsqueeze(1), sin_table[position_ids].unsqueeze(1)  # (B, 1, D)
        self.key_bias[:, :, :, t] = 0.0
        mask = self.key_bias[..., : t + 1]  # (B, 1, 1, T)
        groups = self.num_heads // self.num_kv_heads
        x = self.embed[tokens]
        for weights, (k_cache, v_cache) in zip(self.layers, self.caches):
            normed = self._norm(x)
            q, k, v = self._project_qkv(normed, weights, cos, sin)
            k_cache[:, :, t] = k
            v_cache[:, :, t] = v
            # Grouped queries: the G query heads sharing a KV head become G "positions" of it.
            attended = F.scaled_dot_product_attention(
                q.reshape(batch, self.num_kv_heads, groups, self.head_dim),
                k_cache[:, :, : t + 1],
                v_cache[:, :, : t + 1],
                attn_mask=mask,
            )
            x = _add_linear(x, attended.reshape(batch, -1), weights.o_weight, weights.o_bias)
            x = _add_linear(x, self._mlp_hidden(x, weights), weights.down_weight, weights.down_bias)
        self.length = t + 1
        return self._logits(x)

    def keep_rows(self, index: torch.Tensor) -> None:
        """Drop finished rows from the cache (index: rows to keep, in their new order)."""
        self.caches = [(k[index], v[index]) for k, v in self.caches]
        self.key_bias = self.key_bias[index]

    def release(self) -> None:
        self.caches, self.key_bias = [], None
