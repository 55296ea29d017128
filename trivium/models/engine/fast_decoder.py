"""A hand-written decoder forward for the Llama / Qwen2 / Mistral family, for fast sampling.

On small models the cost of ``model.generate`` is per-call overhead and memory traffic, not
arithmetic. This decoder runs the same math as the Hugging Face modules with far fewer calls:
  * q, k and v come out of ONE matmul, gate and up out of one batched matmul (two plain ones
    in the prefill); every RMSNorm weight is folded into the matmul that follows it, and
    weights are stored pre-transposed;
  * RoPE's rotate-half is a tiny matmul with a signed permutation matrix (exact), and the
    cos/sin rows are gathered once per step for all layers;
  * the KV cache is preallocated and written in place (keys stored transposed, so the score
    matmul reads them with unit stride); a decode step attends with two batched matmuls over
    a view of the filled length, grouped query heads sharing their KV head without copies;
  * the prefill packs the prompts without padding: matmuls see only real tokens, and
    attention runs per group of equal-length prompts with a plain causal mask;
  * finished rows can be dropped from the cache.
It reads the weights from the HF model it wraps; the fused copies are rebuilt whenever any
parameter changed in place (tracked by tensor version counters), so a trainer's
``load_state_dict`` or optimizer step is picked up on the next call.

Fusing copies every weight but the embedding. Past ``FUSE_MAX_BYTES`` of such copies (a model
of about 100M parameters in float32) the decoder computes with transposed *views* of the
model's own weights instead: q, k and v (and gate and up) as separate matmuls, the norms'
weights applied to the activations. Views decode more slowly at that size (1.4-1.6x per step
at the Qwen2.5-0.5B shape on a 2-core Xeon, whose matmul reads an (out, in) weight for a few
rows more slowly than a pre-transposed one), but the copies would cost the layers' size again
in memory and seconds to rebuild after every weight update (there: 1.9 GB, 2.5 s or more).
``fuse=`` forces either way. docs/runtime.md has the measurements.

Must not be used for models with sliding windows, per-head q/k norms or dynamic RoPE:
``unsupported_reason`` says why a model falls back to the generic path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
# Up to this many rows (decode steps) gate and up come from one batched matmul, which saves a
# call; beyond it (prefill) two plain matmuls run faster than the batched kernel.
BATCHED_MLP_MAX_ROWS = 512
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# Largest fused copy (the layers' matrices and the head) the decoder makes; past it, views.
FUSE_MAX_BYTES = 384 * 2**20


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


def fused_copy_bytes(model) -> int:
    """What fusing copies: every matrix of the decoder layers and the output head."""
    layers = sum(p.numel() * p.element_size() for p in model.model.layers.parameters())
    head = model.lm_head.weight
    return layers + head.numel() * head.element_size()


class _LayerWeights(NamedTuple):
    # Fused: each RMSNorm's weight is folded into the rows of the matmul that follows it
    # ((w * n) @ W.T == n @ (W * w).T), so the norms run without a weight (``*_norm`` None).
    # Matrices are stored as (in, out), contiguous: ``x @ W`` is measurably faster than
    # ``x @ W.T`` for these small shapes. Views: the same (in, out) matrices as transposed
    # views of the model's weights, q, k, v (and gate, up) apart, with the norms' weights.
    input_norm: torch.Tensor | None
    qkv: tuple[torch.Tensor, ...]  # fused: one (hidden, (H + 2 KV) * D), columns q, k, v heads
    qkv_bias: torch.Tensor | None  # ((H + 2 KV) * D,)
    o: torch.Tensor  # (H * D, hidden)
    o_bias: torch.Tensor | None
    post_attention_norm: torch.Tensor | None
    # Fused: (2, hidden, intermediate), gate and up as two matrices of one batched matmul, so
    # each comes out contiguous (elementwise ops on a strided half run at about half speed).
    gate_up: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    gate_up_bias: torch.Tensor | None  # (2, 1, intermediate)
    down: torch.Tensor  # (intermediate, hidden)
    down_bias: torch.Tensor | None


class _LayerCache(NamedTuple):
    # Keys transposed, (B * KV, D, capacity): a score matmul q @ K^T reads unit-stride rows.
    keys: torch.Tensor
    values: torch.Tensor  # (B * KV, capacity, D)


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


def _stack_bias(parts: list[torch.Tensor | None], size: int, like: torch.Tensor) -> torch.Tensor | None:
    if all(p is None for p in parts):
        return None
    return torch.stack([p if p is not None else like.new_zeros(size) for p in parts]).unsqueeze(1)


def _matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)


def _add_matmul_(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """residual += x @ W (+ b), in place: the residual add rides on the matmul."""
    residual.addmm_(x, weight)
    if bias is not None:
        residual.add_(bias)


def _packed_causal_attention(q, k, v, groups: list[tuple[int, int]]) -> torch.Tensor:
    """Causal self-attention over packed prompts (N, heads, D); ``groups`` lists (length, rows)
    of consecutive equal-length prompts, so each group is one unmasked causal call."""
    attended = torch.empty_like(q)
    start = 0
    for length, rows in groups:
        stop = start + length * rows

        def block(t: torch.Tensor, start=start, stop=stop, rows=rows, length=length) -> torch.Tensor:
            # (rows * length, heads, D) -> (rows, heads, length, D), a view.
            return t[start:stop].unflatten(0, (rows, length)).transpose(1, 2)

        out = F.scaled_dot_product_attention(block(q), block(k), block(v), is_causal=True, enable_gqa=True)
        block(attended).copy_(out)
        start = stop
    return attended


class FastDecoder:
    """Prefill + single-token decode over a static KV cache, for one batch at a time."""

    def __init__(self, model, *, fuse: bool | None = None):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"fast decoder cannot run this model: {reason}")
        self.model = model
        self.fuse = fused_copy_bytes(model) <= FUSE_MAX_BYTES if fuse is None else fuse
        config = model.config
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.groups = self.num_heads // self.num_kv_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.hidden_size = config.hidden_size
        self.scale = self.head_dim**-0.5
        self.eps = config.rms_norm_eps
        self.act = ACT2FN[config.hidden_act]
        # silu is by far the common case; the in-place functional saves an allocation per layer.
        self._silu = config.hidden_act == "silu"
        self.rotary = model.model.rotary_emb
        self._weights_stamp = None
        self._rope_cos = self._rope_sin = None
        self.caches: list[_LayerCache] = []
        self.key_bias: torch.Tensor | None = None
        self.rows = self.length = self.capacity = 0

    # ---- weights -------------------------------------------------------------------------

    def _stamp(self) -> tuple:
        # Version counters rise on every in-place write (load_state_dict, optimizer.step).
        return tuple((id(p), p._version) for p in self.model.parameters())

    def bind_weights(self, *, force: bool = False) -> None:
        """(Re)build the fused weights if any parameter changed since the last build (``force``:
        in any case; a change made through another tensor of the same memory does not show)."""
        stamp = self._stamp()
        if stamp == self._weights_stamp and not force:
            return
        with torch.no_grad():
            bind_layer = self._fuse_layer if self.fuse else self._view_layer
            self.layers = [bind_layer(layer) for layer in self.model.model.layers]
            self.embed = self.model.model.embed_tokens.weight
            head, final_norm = self.model.lm_head.weight, self.model.model.norm.weight
            self.lm_head = (head * final_norm).t().contiguous() if self.fuse else head.t()
            self.final_norm = None if self.fuse else final_norm
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self.rotate_half = rotate_half_matrix(self.head_dim, self.dtype, self.device)
        self.eps_tensor = torch.tensor([self.eps], dtype=self.dtype, device=self.device)
        self._rope_cos = self._rope_sin = None
        self._weights_stamp = stamp

    def _fuse_layer(self, layer) -> _LayerWeights:
        attention, mlp = layer.self_attn, layer.mlp
        q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
        qkv = torch.cat([q.weight, k.weight, v.weight]) * layer.input_layernorm.weight
        gate, up = mlp.gate_proj, mlp.up_proj
        gate_up = torch.cat([gate.weight, up.weight]) * layer.post_attention_layernorm.weight
        return _LayerWeights(
            input_norm=None,
            qkv=(qkv.t().contiguous(),),
            qkv_bias=_cat_bias(
                [q.bias, k.bias, v.bias], [q.out_features, k.out_features, v.out_features], qkv
            ),
            o=attention.o_proj.weight.t().contiguous(),
            o_bias=attention.o_proj.bias,
            post_attention_norm=None,
            gate_up=gate_up.unflatten(0, (2, -1)).transpose(1, 2).contiguous(),
            gate_up_bias=_stack_bias([gate.bias, up.bias], gate.out_features, gate_up),
            down=mlp.down_proj.weight.t().contiguous(),
            down_bias=mlp.down_proj.bias,
        )

    def _view_layer(self, layer) -> _LayerWeights:
        """The layer's weights as transposed views: nothing copied but the (small) biases."""
        attention, mlp = layer.self_attn, layer.mlp
        q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
        gate, up = mlp.gate_proj, mlp.up_proj
        return _LayerWeights(
            input_norm=layer.input_layernorm.weight,
            qkv=(q.weight.t(), k.weight.t(), v.weight.t()),
            qkv_bias=_cat_bias(
                [q.bias, k.bias, v.bias], [q.out_features, k.out_features, v.out_features], q.weight
            ),
            o=attention.o_proj.weight.t(),
            o_bias=attention.o_proj.bias,
            post_attention_norm=layer.post_attention_layernorm.weight,
            gate_up=(gate.weight.t(), up.weight.t()),
            gate_up_bias=_stack_bias([gate.bias, up.bias], gate.out_features, gate.weight),
            down=mlp.down_proj.weight.t(),
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

    # ---- shared pieces -------------------------------------------------------------------

    def _norm(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """x / rms(x) (* weight, when not folded elsewhere). One reduction kernel instead of
        F.rms_norm's pow/mean/add/rsqrt chain: rms^2 + eps == |x|^2 / n + eps."""
        length = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        normed = x * torch.addcmul(self.eps_tensor, length, length, value=1.0 / x.shape[-1]).rsqrt_()
        return normed if weight is None else normed.mul_(weight)

    def _qkv(self, x: torch.Tensor, weights: _LayerWeights, cos: torch.Tensor, sin: torch.Tensor):
        """x: (N, hidden) -> roped q (N, H, D), roped k (N, KV, D), v (N, KV, D) (a view)."""
        h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        normed = self._norm(x, weights.input_norm)
        if len(weights.qkv) == 1:
            fused = _matmul(normed, weights.qkv[0], weights.qkv_bias)
        else:
            fused = torch.cat([torch.mm(normed, w) for w in weights.qkv], dim=-1)
            if weights.qkv_bias is not None:
                fused.add_(weights.qkv_bias)
        # rotate_half of every head (v included, unused) in one contiguous 2-D matmul.
        rotated = torch.mm(fused.view(-1, d), self.rotate_half).view(x.shape[0], h + 2 * kv, d)
        heads = fused.view(x.shape[0], h + 2 * kv, d)
        q = torch.addcmul(heads[:, :h] * cos, rotated[:, :h], sin)
        k = torch.addcmul(heads[:, h : h + kv] * cos, rotated[:, h : h + kv], sin)
        return q, k, heads[:, h + kv :]

    def _mlp_(self, x: torch.Tensor, weights: _LayerWeights) -> None:
        """x += down(act(gate(norm x)) * up(norm x)), in place."""
        normed = self._norm(x, weights.post_attention_norm)
        if x.shape[0] > BATCHED_MLP_MAX_ROWS or isinstance(weights.gate_up, tuple):
            gate, up = (_matmul(normed, w, None) for w in weights.gate_up)
            if weights.gate_up_bias is not None:
                gate.add_(weights.gate_up_bias[0])
                up.add_(weights.gate_up_bias[1])
        elif weights.gate_up_bias is None:  # one call for both: the same rows, expanded without a copy
            gate, up = torch.bmm(normed.expand(2, *x.shape), weights.gate_up)
        else:
            gate, up = torch.baddbmm(weights.gate_up_bias, normed.expand(2, *x.shape), weights.gate_up)
        gate = F.silu(gate, inplace=True) if self._silu else self.act(gate)
        _add_matmul_(x, gate.mul_(up), weights.down, weights.down_bias)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(self._norm(x, self.final_norm), self.lm_head).float()

    # ---- prefill -------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, capacity: int
    ) -> torch.Tensor:
        """Run left-padded prompts (B, P); allocate a cache for ``capacity`` positions.

        Returns float32 logits (B, V) of the last prompt position. Every row needs at least
        one real token, and its real tokens must be the right-most ones (left padding).
        """
        self.bind_weights()
        batch, prompt_len = input_ids.shape
        if capacity < prompt_len:
            raise ValueError(f"capacity {capacity} is smaller than the prompt width {prompt_len}")
        device, kv = self.device, self.num_kv_heads
        valid = attention_mask.to(device=device, dtype=torch.bool)
        lengths = valid.sum(dim=1)
        if bool((lengths == 0).any()):
            raise ValueError("every prompt row needs at least one token")

        # Pack rows sorted by length, so equal-length prompts form contiguous blocks of tokens.
        order = torch.argsort(lengths, stable=True)
        sorted_valid = valid[order]
        tokens = input_ids.to(device)[order][sorted_valid]
        token_positions = position_ids.to(device)[order][sorted_valid]
        token_rows = order.unsqueeze(1).expand(batch, prompt_len)[sorted_valid]
        token_columns = torch.arange(prompt_len, device=device).expand(batch, prompt_len)[sorted_valid]
        group_lengths, group_rows = torch.unique_consecutive(lengths[order], return_counts=True)
        groups = list(zip(group_lengths.tolist(), group_rows.tolist()))

        cos_table, sin_table = self._rope_tables(int(position_ids.max()) + capacity)
        cos, sin = cos_table[token_positions].unsqueeze(1), sin_table[token_positions].unsqueeze(1)

        # Additive key mask (B * KV, 1, capacity): -inf on each row's left padding, 0 elsewhere
        # (columns past the prompt are only ever read once written).
        row_bias = torch.zeros(batch, capacity, dtype=self.dtype, device=device)
        row_bias[:, :prompt_len].masked_fill_(~valid, float("-inf"))
        self.key_bias = row_bias.repeat_interleave(kv, dim=0).unsqueeze(1)
        padded_columns = prompt_len - int(lengths.min())
        self.capacity = capacity

        self.caches = []
        x = self.embed[tokens]
        for weights in self.layers:
            q, k, v = self._qkv(x, weights, cos, sin)
            self.caches.append(
                self._new_cache(batch, capacity, padded_columns, k, v, token_rows, token_columns)
            )
            attended = _packed_causal_attention(q, k, v, groups)
            _add_matmul_(x, attended.flatten(1), weights.o, weights.o_bias)
            self._mlp_(x, weights)

        self.rows, self.length = batch, prompt_len
        last = torch.cumsum(lengths[order], dim=0) - 1
        logits = torch.empty(batch, self.lm_head.shape[1], dtype=torch.float32, device=device)
        logits[order] = self._logits(x[last])
        return logits

    def _new_cache(self, batch, capacity, padded_columns, k, v, token_rows, token_columns) -> _LayerCache:
        kv, d = self.num_kv_heads, self.head_dim
        keys = torch.empty(batch, kv, d, capacity, dtype=self.dtype, device=self.device)
        values = torch.empty(batch, kv, capacity, d, dtype=self.dtype, device=self.device)
        # Padding columns are masked, but 0 * NaN from uninitialised memory would still poison
        # the output: zero every column that is padding in some row.
        keys[..., :padded_columns].zero_()
        values[:, :, :padded_columns].zero_()
        keys.permute(0, 3, 1, 2)[token_rows, token_columns] = k
        values.transpose(1, 2)[token_rows, token_columns] = v
        return _LayerCache(keys.view(batch * kv, d, -1), values.view(batch * kv, capacity, d))

    # ---- decode --------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row (B,) at positions (B,); returns float32 logits (B, V)."""
        batch, kv, groups, d = self.rows, self.num_kv_heads, self.groups, self.head_dim
        t = self.length
        if tokens.shape[0] != batch:
            raise ValueError(f"decode got {tokens.shape[0]} tokens for {batch} cached rows")
        if t >= self.capacity:
            raise ValueError(f"the cache is full: {self.capacity} positions were allocated at prefill")
        cos_table, sin_table = self._rope_tables(int(position_ids.max()) + 1)
        cos, sin = cos_table[position_ids].unsqueeze(1), sin_table[position_ids].unsqueeze(1)  # (B, 1, D)
        key_bias = self.key_bias[:, :, : t + 1]
        scale = self.scale
        x = self.embed[tokens]
        for weights, (keys, values) in zip(self.layers, self.caches):
            q, k, v = self._qkv(x, weights, cos, sin)
            keys.view(batch, kv, d, -1)[:, :, :, t] = k
            values.view(batch, kv, -1, d)[:, :, t] = v
            # Grouped queries: the G query heads sharing a KV head are G rows of one matmul.
            scores = torch.baddbmm(key_bias, q.view(batch * kv, groups, d), keys[:, :, : t + 1], alpha=scale)
            attended = torch.bmm(torch.softmax(scores, dim=-1), values[:, : t + 1])
            _add_matmul_(x, attended.view(batch, -1), weights.o, weights.o_bias)
            self._mlp_(x, weights)
        self.length = t + 1
        return self._logits(x)

    def keep_rows(self, index: torch.Tensor) -> None:
        """Drop finished rows from the cache (index: rows to keep, in their new order)."""
        batch, kv, d = self.rows, self.num_kv_heads, self.head_dim
        self.rows = int(index.shape[0])
        self.caches = [
            _LayerCache(
                keys.view(batch, kv, d, -1)[index].view(self.rows * kv, d, -1),
                values.view(batch, kv, -1, d)[index].view(self.rows * kv, -1, d),
            )
            for keys, values in self.caches
        ]
        self.key_bias = self.key_bias.view(batch, kv, 1, -1)[index].view(self.rows * kv, 1, -1)

    def release(self) -> None:
        self.caches, self.key_bias, self.rows = [], None, 0
