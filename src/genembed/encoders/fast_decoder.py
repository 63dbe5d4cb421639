"""Inference fast path: a lean forward of Llama-family decoders on CPU, with oneDNN linears and fused ops.

Why it is faster than calling the transformers model (measured in ``benchmarks/encode_throughput.py``,
explained in ``docs/performance.md``):

- fp32 ``nn.Linear`` on CPU runs through MKL, which on AMD CPUs uses its AVX2 kernels; oneDNN's AVX-512
  kernels do the same GEMMs about 2.2x faster on these cores. Every projection here is a oneDNN call.
- SiLU, the gate-times-up product and both residual adds are fused into the GEMMs as oneDNN post-ops,
  and RMSNorm is one fused kernel: several memory-bound passes per layer fewer.
- Batches are right-padded, so prefill attention is the causal flash kernel with no mask at all (it also
  skips the masked half of the score matrix); only single-token soft-token steps take a small key mask.
- GIRCSE steps write one slot of a preallocated KV cache in place: no cache concatenation and no 4D mask
  construction per step, and one ``(B, 1, D)`` pass through the layers.
- For GIRCSE, only the prompt's last position is carried through the last layer's MLP (the other
  positions' final hidden states are never used; their keys and values are).
- Under causal attention a prompt can start after a cached prefix (its template and instruction,
  :mod:`genembed.encoders.prefix_cache`): the rows sit at positions ``P..``, their prefill attends to the
  prefix's keys with a bottom-right causal mask, and the KV cache holds the prefix in its first slots.

It is used only for inference (no gradients), on CPU, for float32 or bfloat16 weights of a supported
architecture (Llama, Mistral and Qwen2 without sliding windows); :meth:`FastDecoder.build` returns None
otherwise and callers use the transformers path (:func:`~genembed.backbone.attention.run_decoder`,
:func:`~genembed.encoders.soft_tokens.generate_soft_tokens`), which stays the reference: tests check that
both give the same hidden states. A peft LoRA projection (plain LoRA, adapter enabled) runs as one fused
linear on ``W + scale * B @ A``, computed once and kept until a weight changes (memory: one extra copy
of the adapted projections); other non-``nn.Linear`` projections are called as modules, so they keep
working without the fusions. Set ``GENEMBED_FAST_PATH=0`` to switch the fast path off.
"""

from __future__ import annotations

import functools
import os
import platform
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..backbone.attention import decoder_stack
from .methods import DEFAULT_TAU
from .prefix_cache import PrefixStates
from .soft_tokens import SoftTokenOutput, output_head, soft_token_loop

__all__ = ["FastDecoder", "KVCache", "right_pad"]

_ARCHITECTURES = ("llama", "mistral", "qwen2")
# GIRCSE prefills of large batches run in row chunks of about this many tokens, and the steps on all rows
# together: on the 2-core EPYC here the steps' stack cost 1.46x less per row at 128 rows than at 32, while a
# 2,048-token prefill ran no faster than four 512-token ones (docs/performance.md)
PREFILL_CHUNK_TOKENS = 512
_LAYER_PARTS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "input_layernorm",
    "post_attention_layernorm",
)


def _unsupported_reason(model: Any) -> str | None:
    """Why the fast path cannot run this model, or None when it can."""
    if os.environ.get("GENEMBED_FAST_PATH", "1") == "0":
        return "GENEMBED_FAST_PATH=0"
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if config is None or getattr(config, "model_type", None) not in _ARCHITECTURES:
        return f"architecture {getattr(config, 'model_type', None)!r} is not one of {_ARCHITECTURES}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} is not silu"
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True):
        return "sliding-window attention"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return "layers with non-full attention"
    weight = next(base.parameters())
    if weight.device.type != "cpu":
        return f"device {weight.device} is not the CPU"
    if weight.dtype not in (torch.float32, torch.bfloat16):
        return f"dtype {weight.dtype} is not float32 or bfloat16"
    if weight.dtype == torch.bfloat16 and not _onednn_bf16():
        return "bfloat16 weights on a CPU without oneDNN bfloat16 kernels (no AVX512-BF16 / AMX)"
    stack = decoder_stack(model)
    for part in ("embed_tokens", "rotary_emb", "norm", "layers"):
        if not hasattr(stack, part):
            return f"the decoder stack has no {part}"
    for layer in stack.layers:
        for part in _LAYER_PARTS:
            if _get(layer, part) is None:
                return f"a decoder layer has no {part}"
    return None


def _onednn_bf16() -> bool:
    """Whether oneDNN has bfloat16 kernels on this CPU: without them its fused linears refuse bf16 inputs
    ("could not create a primitive descriptor"), seen on an AVX2-only CPU."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _get(module: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        module = getattr(module, name, None)
    return module


def _onednn_available() -> bool:
    """oneDNN's fused linear op exists (x86 builds of torch with mkldnn)."""
    return (
        torch.backends.mkldnn.is_available()
        and platform.machine().lower() in ("x86_64", "amd64")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


_ONEDNN = _onednn_available()


def _plain(module: Any) -> bool:
    return _ONEDNN and type(module) is torch.nn.Linear


@dataclass(frozen=True)
class _Merged:
    """The effective weight of a LoRA projection, and the weights' versions it was computed from."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    stamp: tuple


_MERGED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _lora_stamp(module: Any, names: list[str]) -> tuple:
    """Identifies the weights a merge used: an optimizer step or a reload changes a tensor's version."""
    tensors = [module.base_layer.weight] + [
        w for n in names for w in (module.lora_A[n].weight, module.lora_B[n].weight)
    ]
    return tuple(names), tuple((t.data_ptr(), t._version) for t in tensors), tuple(module.scaling[n] for n in names)


def _effective(module: Any) -> Any:
    """A plain ``nn.Linear`` as it is; a peft LoRA ``Linear`` as its merged weight (or its base layer when the
    adapter is off or already merged into it); None for anything else (called as a module)."""
    if _plain(module):
        return module
    base = getattr(module, "base_layer", None)
    if not _ONEDNN or base is None or type(base) is not torch.nn.Linear or not hasattr(module, "get_delta_weight"):
        return None
    if getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
        return base
    names = [n for n in module.active_adapters if n in module.lora_A]
    if any(module.use_dora.get(n, False) for n in names) or getattr(module, "fan_in_fan_out", False):
        return None
    if not names:
        return base
    stamp = _lora_stamp(module, names)
    cached = _MERGED.get(module)
    if cached is None or cached.stamp != stamp:
        weight = base.weight.detach().clone()
        for name in names:
            weight += module.get_delta_weight(name).to(weight.dtype)
        cached = _Merged(weight, base.bias, stamp)
        _MERGED[module] = cached
    return cached


def _linear(module: Any, x: torch.Tensor, post: str = "none") -> torch.Tensor:
    """``module(x)``, with an optional fused ``"swish"`` (SiLU) post-op; oneDNN for plain and LoRA linears."""
    linear = _effective(module)
    if linear is not None:
        return torch.ops.mkldnn._linear_pointwise(x, linear.weight, linear.bias, post, [], "")
    y = module(x)
    return F.silu(y) if post == "swish" else y


def _linear_then(module: Any, x: torch.Tensor, other: torch.Tensor, op: str) -> torch.Tensor:
    """``module(x) + other`` (``op="add"``) or ``module(x) * other`` (``"mul"``), fused for plain and LoRA linears."""
    linear = _effective(module)
    if linear is not None:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, linear.weight, linear.bias, op)
    y = module(x)
    return y + other if op == "add" else y * other


def _rms_norm(norm: Any, h: torch.Tensor) -> torch.Tensor:
    """Llama RMSNorm: normalized in float32, cast back, then scaled (as transformers does)."""
    if h.dtype == torch.float32:
        return F.rms_norm(h, (h.shape[-1],), norm.weight, norm.variance_epsilon)
    return norm.weight * F.rms_norm(h.float(), (h.shape[-1],), None, norm.variance_epsilon).to(h.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding ``x * cos + rotate_half(x) * sin``; ``x`` ``(B, heads, T, hd)``, cos/sin ``(B, 1, T, hd)``."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def right_pad(input_ids: torch.Tensor, attention_mask: torch.Tensor, *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Move left padding to the right: ``(input_ids, lengths, *rows)``, each ``(B, T)`` tensor rolled alike."""
    width = input_ids.shape[1]
    lengths = attention_mask.sum(dim=1)
    index = (torch.arange(width, device=input_ids.device)[None] + (width - lengths)[:, None]) % width
    return input_ids.gather(1, index), lengths, *(r.gather(1, index) for r in rows)


@dataclass
class KVCache:
    """Preallocated keys and values, per layer ``(B, kv_heads, T + steps, hd)``; slots ``[0, T)`` hold the
    (right-padded) prompt, slot ``T + k - 1`` the k-th soft token. ``key_mask`` ``(B, 1, 1, T + steps)``
    marks the slots a soft token may attend to (the prompt's real tokens and every soft token)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor
    lengths: torch.Tensor
    prompt_width: int
    filled: int = 0

    @functools.cached_property
    def key_bias(self) -> torch.Tensor:
        """``key_mask`` as an additive float32 bias: 0 where a soft token may attend, -inf elsewhere."""
        return torch.zeros(self.key_mask.shape).masked_fill(~self.key_mask, float("-inf"))


class FastDecoder:
    """Inference-only forward of a supported decoder; build it with :meth:`build`.

    Inputs are right-padded: row ``b`` holds ``lengths[b]`` real tokens at positions ``0..lengths[b]-1``,
    the same positions the transformers path gives a left-padded row.
    """

    def __init__(self, model: Any):
        self.model = model
        self.stack = decoder_stack(model)
        config = self.stack.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.stack.layers[0].self_attn.scaling

    @classmethod
    def build(cls, model: Any) -> FastDecoder | None:
        """A fast decoder for ``model``, or None when the fast path does not apply (see the module docstring).

        Also None when gradients are enabled: the fast path is for inference only.
        """
        if torch.is_grad_enabled():
            return None
        return None if _unsupported_reason(model) else cls(model)

    @property
    def embed(self) -> torch.Tensor:
        return self.stack.embed_tokens.weight

    def _rotary(self, like: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.stack.rotary_emb(like, positions)  # (B or 1, T, hd)
        return cos[:, None], sin[:, None]

    def _heads(self, proj: Any, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """A q/k/v projection of ``x`` ``(B, T, D)`` split into heads: ``(B, heads, T, hd)``."""
        batch, width = x.shape[:2]
        return _linear(proj, x).view(batch, width, heads or self.heads, self.head_dim).transpose(1, 2)

    def _attend_one(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """Attention of one query per row, ``q`` ``(B, heads, 1, hd)`` over ``(B, kv_heads, S, hd)`` keys and
        values with an additive ``bias`` ``(B, 1, 1, S)``: two batched matmuls with the query heads of each
        key/value head stacked, a third faster than the SDPA kernel for a single query."""
        batch, groups = q.shape[0], self.heads // self.kv_heads
        q = q.reshape(batch, self.kv_heads, groups, self.head_dim)  # (B, kv, groups, hd)
        scores = torch.matmul(q, keys.transpose(-1, -2)).float() * self.scale + bias  # (B, kv, groups, S)
        weights = torch.softmax(scores, dim=-1).to(values.dtype)
        return torch.matmul(weights, values).view(batch, self.heads, 1, self.head_dim)

    def _finish_layer(self, layer: Any, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """o_proj + residual, then the MLP block + residual; ``attended`` ``(B, heads, T, hd)``."""
        batch, _, width, _ = attended.shape
        attended = attended.transpose(1, 2).reshape(batch, width, self.heads * self.head_dim)
        h = _linear_then(layer.self_attn.o_proj, attended, residual, "add")
        x = _rms_norm(layer.post_attention_layernorm, h)
        mlp = layer.mlp
        gated = _linear_then(mlp.up_proj, x, _linear(mlp.gate_proj, x, "swish"), "mul")
        return _linear_then(mlp.down_proj, gated, h, "add")

    def _layer_kv(
        self, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A layer's rotated keys and its values for normalized inputs ``x`` ``(B, T, D)``: ``(B, kv, T, hd)``."""
        attn = layer.self_attn
        return _rope(self._heads(attn.k_proj, x, self.kv_heads), cos, sin), self._heads(attn.v_proj, x, self.kv_heads)

    def prefix_states(self, ids: list[int] | tuple[int, ...]) -> PrefixStates:
        """The keys and values of a prefix (causal), computed at batch 1; the last layer stops at its keys
        and values (its attention and MLP outputs would never be used)."""
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.embed.device)
        h = self.embed[input_ids]  # (1, P, D)
        cos, sin = self._rotary(h, torch.arange(input_ids.shape[1], device=h.device)[None])
        keys, values = [], []
        last = len(self.stack.layers) - 1
        for i, layer in enumerate(self.stack.layers):
            x = _rms_norm(layer.input_layernorm, h)
            k, v = self._layer_kv(layer, x, cos, sin)
            keys.append(k.contiguous())
            values.append(v.contiguous())
            if i < last:
                q = _rope(self._heads(layer.self_attn.q_proj, x), cos, sin)
                attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)
                h = self._finish_layer(layer, attended, h)
        return PrefixStates(tuple(keys), tuple(values))

    def prefill(
        self,
        input_ids: torch.Tensor,
        lengths: torch.Tensor,
        *,
        causal: bool = True,
        cache_steps: int | None = None,
        prefix: PrefixStates | None = None,
        chunk_tokens: int = 0,
    ) -> tuple[torch.Tensor, KVCache | None]:
        """Run right-padded prompts through the stack.

        Args:
            input_ids: ``(B, T)`` right-padded token ids.
            lengths: ``(B,)`` real tokens per row (>= 1).
            causal: causal attention, else bidirectional among each row's real tokens.
            cache_steps: None for a plain forward returning every position's final hidden state ``(B, T, D)``.
                An int K keeps a KV cache with room for K soft tokens and returns only each row's last real
                position ``(B, D)`` (the last layer's MLP runs on that position only).
            prefix: the states of P tokens that come before every row (causal only): the rows sit at
                positions ``P..``, attend to them, and the KV cache holds them first.
            chunk_tokens: with ``cache_steps``, run the prompts in row chunks of about this many tokens
                (0: all rows at once) into one cache, so that the soft-token steps run on every row together.

        Returns:
            ``(hidden, cache)``; ``cache`` is None without ``cache_steps``.
        """
        batch, width = input_ids.shape
        before = 0 if prefix is None else prefix.length
        if before and not causal:
            raise ValueError("a prefix's states can be reused under causal attention only")
        if cache_steps is None:
            return self._forward(input_ids, lengths, causal, prefix, None, slice(None)), None
        total = before + width + cache_steps
        slots = torch.arange(total, device=input_ids.device)[None]
        shape = (batch, self.kv_heads, total, self.head_dim)
        layers = len(self.stack.layers)
        cache = KVCache(
            keys=[self.embed.new_empty(shape) for _ in range(layers)],
            values=[self.embed.new_empty(shape) for _ in range(layers)],
            key_mask=((slots < (before + lengths)[:, None]) | (slots >= before + width))[:, None, None],
            lengths=before + lengths,
            prompt_width=before + width,
        )
        for i in range(layers if before else 0):
            cache.keys[i][:, :, :before] = prefix.keys[i]
            cache.values[i][:, :, :before] = prefix.values[i]
        rows = max(1, chunk_tokens // width) if chunk_tokens else batch
        hidden = [
            self._forward(input_ids[r : r + rows], lengths[r : r + rows], causal, prefix, cache, slice(r, r + rows))
            for r in range(0, batch, rows)
        ]
        cache.filled = before + width
        return torch.cat(hidden) if len(hidden) > 1 else hidden[0], cache

    def _forward(
        self,
        input_ids: torch.Tensor,
        lengths: torch.Tensor,
        causal: bool,
        prefix: PrefixStates | None,
        cache: KVCache | None,
        rows: slice,
    ) -> torch.Tensor:
        """:meth:`prefill` of some rows: their keys and values go to those ``rows`` of ``cache``."""
        batch, width = input_ids.shape
        before = 0 if prefix is None else prefix.length
        h = self.embed[input_ids]  # (B, T, D)
        positions = torch.arange(width, device=h.device)[None]
        cos, sin = self._rotary(h, positions + before)
        key_mask = None if causal else (positions < lengths[:, None])[:, None, None]  # (B, 1, 1, T)
        if before:  # causal from the bottom right: token t sees the prefix and tokens <= t
            key_mask = torch.arange(before + width, device=h.device)[None] <= positions[0, :, None] + before
        last = len(self.stack.layers) - 1
        index = torch.arange(batch, device=h.device)
        for i, layer in enumerate(self.stack.layers):
            x = _rms_norm(layer.input_layernorm, h)
            only_last = cache is not None and i == last  # only each row's last real position goes on
            if only_last:
                h, x_last = h[index, lengths - 1][:, None], x[index, lengths - 1][:, None]  # (B, 1, D)
                cos_last, sin_last = cos[0, 0, lengths - 1][:, None, None], sin[0, 0, lengths - 1][:, None, None]
                q = _rope(self._heads(layer.self_attn.q_proj, x_last), cos_last, sin_last)  # (B, heads, 1, hd)
            else:
                q = _rope(self._heads(layer.self_attn.q_proj, x), cos, sin)
            k, v = self._layer_kv(layer, x, cos, sin)
            if cache is not None:
                cache.keys[i][rows, :, before : before + width] = k
                cache.values[i][rows, :, before : before + width] = v
                if before:
                    k, v = cache.keys[i][rows, :, : before + width], cache.values[i][rows, :, : before + width]
            elif before:
                k = torch.cat([prefix.keys[i].expand(batch, -1, -1, -1), k], dim=2)
                v = torch.cat([prefix.values[i].expand(batch, -1, -1, -1), v], dim=2)
            if only_last:  # the last real query sees every real key, causal or not
                mask = (torch.arange(before + width, device=h.device)[None] < (before + lengths)[:, None])[
                    :, None, None
                ]
                attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)
            else:
                attended = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=key_mask, is_causal=causal and not before, scale=self.scale, enable_gqa=True
                )
            h = self._finish_layer(layer, attended, h)
        h = _rms_norm(self.stack.norm, h)
        return h[:, 0] if cache is not None else h

    def step(self, embeds: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Feed one soft token per row ``(B, D)``; return its final hidden state ``(B, D)``."""
        slot = cache.filled
        if slot >= cache.key_mask.shape[-1]:
            raise ValueError(f"the KV cache has room for {cache.key_mask.shape[-1] - cache.prompt_width} soft tokens")
        h = embeds[:, None]  # (B, 1, D)
        positions = (cache.lengths + (slot - cache.prompt_width))[:, None]  # (B, 1)
        cos, sin = self._rotary(h, positions)
        bias = cache.key_bias[..., : slot + 1]
        for i, layer in enumerate(self.stack.layers):
            x = _rms_norm(layer.input_layernorm, h)
            k, v = self._layer_kv(layer, x, cos, sin)
            cache.keys[i][:, :, slot] = k[:, :, 0]
            cache.values[i][:, :, slot] = v[:, :, 0]
            q = _rope(self._heads(layer.self_attn.q_proj, x), cos, sin)  # (B, heads, 1, hd)
            keys, values = cache.keys[i][:, :, : slot + 1], cache.values[i][:, :, : slot + 1]
            h = self._finish_layer(layer, self._attend_one(q, keys, values, bias), h)
        cache.filled = slot + 1
        return _rms_norm(self.stack.norm, h)[:, 0]

    def soft_tokens(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        steps: int,
        tau: float = DEFAULT_TAU,
        causal: bool = True,
        stop_tol: float | None = None,
        prefix: PrefixStates | None = None,
    ) -> SoftTokenOutput:
        """:func:`~genembed.encoders.soft_tokens.generate_soft_tokens` on this path, for left-padded prompts
        (after ``prefix``, when given)."""
        input_ids, lengths = right_pad(input_ids, attention_mask)
        h_0, cache = self.prefill(
            input_ids, lengths, causal=causal, cache_steps=steps, prefix=prefix, chunk_tokens=PREFILL_CHUNK_TOKENS
        )
        head, _ = output_head(self.model)
        soft_embedding = self.soft_embedding_fn(head, tau)
        return soft_token_loop(h_0, lambda d_k, k: self.step(d_k, cache), soft_embedding, steps, stop_tol)

    def soft_embedding_fn(self, head: Any, tau: float) -> Any:
        """``h -> (p, d)``: ``p = softmax(lm_head(h) / tau)`` ``(B, V)`` and ``d = p @ E`` ``(B, D)``."""
        _, embed = output_head(self.model)

        def soft_embedding(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = _linear(head, h).float()  # (B, V), a new tensor: scaled in place, then normalized in place
            if tau != 1.0:
                logits.div_(tau)
            probs = torch.softmax(logits, dim=-1)
            if _ONEDNN:  # p @ E as a linear with weight E^T (a view): 2x faster than torch.mm (MKL) here
                return probs, torch.ops.mkldnn._linear_pointwise(probs.to(embed.dtype), embed.t(), None, "none", [], "")
            return probs, probs.to(embed.dtype) @ embed

        return soft_embedding

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *rows: torch.Tensor,
        causal: bool = True,
        prefix: PrefixStates | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """One pass over left-padded prompts (after ``prefix``, when given): ``(hidden, lengths, *rows)``, all
        right-padded alike (``hidden`` ``(B, T, D)``; row ``b``'s last real token is at ``lengths[b] - 1``)."""
        input_ids, lengths, *rolled = right_pad(input_ids, attention_mask, *rows)
        hidden, _ = self.prefill(input_ids, lengths, causal=causal, prefix=prefix)
        return hidden, lengths, *rolled
