"""The embedding core: one prepared (tokenized, left-padded) batch in, its embeddings out, for any method.

Encoding (:mod:`genembed.encoders.embedder`), the training forward (:mod:`genembed.training.forward`),
index building (:mod:`genembed.retrieval.kv_embed`) and the server (through ``encode``) all embed
here, with one :class:`~genembed.encoders.settings.EmbedSettings`; what differs per method is read
from its :class:`~genembed.encoders.methods.MethodRules`:

- soft tokens (GIRCSE): K soft tokens after the prompt; ``z_k`` = mean of their hidden states
  ``h_1..h_k`` (:mod:`genembed.encoders.soft_tokens`);
- ``mean``: one pass, mean of the text tokens' last hidden states (instruction and template tokens
  are attended to but not pooled);
- ``last``: one pass, the last prompt token's hidden state.

It runs with gradients (training) or without, on the transformers path or, for inference, on the
CPU fast path (:mod:`genembed.encoders.fast_decoder`), and can keep the prompt's KV cache. Under causal
attention the template and instruction before the text can be computed once
(:mod:`genembed.encoders.shared_prefix`): per batch with ``share_prefix`` (training), or once per
instruction with a ``prefixes`` lookup (inference; :mod:`genembed.encoders.prefix_cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..backbone.attention import run_decoder
from .batching import Batch
from .fast_decoder import FastDecoder
from .methods import method_rules
from .pooling import last_token_pool, masked_mean, running_means
from .prefix_cache import PrefixStates, compute_prefix_states
from .settings import EmbedSettings
from .shared_prefix import embed_by_prefix
from .soft_tokens import generate_soft_tokens, with_prefix_mask

__all__ = ["BatchEmbeddings", "embed_prepared"]

# single-pass pooling by name: (last hidden states, text mask, each row's last token state) -> (B, D)
_SINGLE_PASS_POOLING = {
    "mean": lambda hidden, text_mask, last: masked_mean(hidden, text_mask),
    "last": lambda hidden, text_mask, last: last,
}


@dataclass
class BatchEmbeddings:
    """``steps``: ``(B, K, D)`` un-normalized ``z_1..z_K`` (``K = 1`` for single-pass methods).
    ``steps_used``: ``(B,)`` steps each row used (adaptive soft tokens only, else None).
    ``cache``: the prompt's KV cache (for soft tokens followed by theirs), when asked for."""

    steps: torch.Tensor
    steps_used: torch.Tensor | None = None
    cache: Any = None

    @property
    def final(self) -> torch.Tensor:
        """``(B, D)``: each row's embedding (its last step, or with adaptive steps the step it stopped at)."""
        if self.steps_used is not None:
            return self.steps[torch.arange(self.steps.shape[0]), self.steps_used - 1]
        return self.steps[:, -1]


PrefixLookup = Callable[[tuple[int, ...]], PrefixStates]


def embed_prepared(
    model: Any,
    batch: Batch,
    settings: EmbedSettings,
    *,
    keep_kv: bool = False,
    fast: FastDecoder | None = None,
    prefixes: PrefixLookup | None = None,
    share_prefix: bool = False,
) -> BatchEmbeddings:
    """Embed one prepared batch.

    Args:
        model: a causal LM (or peft wrapper).
        batch: left-padded prompts with their text masks (:func:`genembed.encoders.batching.collate`).
        settings: how to embed.
        keep_kv: also return the KV cache of the pass (not with ``fast``; no prefix sharing).
        fast: the inference fast path of ``model`` (:meth:`FastDecoder.build`), or None for transformers.
        prefixes: prefix ids -> their states (:meth:`~genembed.encoders.prefix_cache.PrefixCache.lookup`):
            every row runs after its cached prefix (causal attention only). None: with
            ``share_prefix`` each prefix is computed once for this batch, else prompts run whole.
        share_prefix: compute each prefix once for this batch (causal attention; same embeddings up to
            rounding; :attr:`~genembed.encoders.settings.RunOptions.share_prefix`).
    """
    rules = method_rules(settings.method)
    if not rules.uses_steps and rules.pooling not in _SINGLE_PASS_POOLING:
        raise ValueError(f"single-pass pooling must be one of {tuple(_SINGLE_PASS_POOLING)}, got {rules.pooling!r}")
    shared = settings.attention == "causal" and not keep_kv and (prefixes is not None or share_prefix)
    if not shared:
        return _embed(model, batch, settings, keep_kv=keep_kv, fast=fast)

    def group(rows: Batch, prefix_ids: tuple[int, ...] | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        prefix = None
        if prefix_ids is not None:
            prefix = prefixes(prefix_ids) if prefixes is not None else compute_prefix_states(model, prefix_ids)
        out = _embed(model, rows, settings, fast=fast, prefix=prefix)
        return out.steps, out.steps_used

    steps, used = embed_by_prefix(batch, group, share_single=prefixes is not None)
    return BatchEmbeddings(steps, used)  # type: ignore[arg-type]


def _embed(
    model: Any,
    batch: Batch,
    settings: EmbedSettings,
    *,
    keep_kv: bool = False,
    fast: FastDecoder | None = None,
    prefix: PrefixStates | None = None,
) -> BatchEmbeddings:
    """Embed rows, all of them after ``prefix`` when one is given."""
    rules = method_rules(settings.method)
    causal = settings.attention == "causal"
    stop_tol = settings.stop_tol if settings.adaptive else None
    if rules.uses_steps:
        if fast is not None:
            out = fast.soft_tokens(
                batch.input_ids,
                batch.attention_mask,
                steps=settings.steps,
                tau=settings.tau,
                causal=causal,
                stop_tol=stop_tol,
                prefix=prefix,
            )
        else:
            out = generate_soft_tokens(
                model,
                batch.input_ids,
                batch.attention_mask,
                steps=settings.steps,
                tau=settings.tau,
                attention=settings.attention,  # type: ignore[arg-type]
                use_cache=settings.use_cache,
                stop_tol=stop_tol,
                prefix=prefix,
            )
        used = out.steps_used if settings.adaptive else None
        return BatchEmbeddings(running_means(out.hidden), used, out.cache if keep_kv else None)  # (B, K, D)
    cache = None
    if fast is not None:
        hidden, lengths, text_mask = fast.hidden_states(
            batch.input_ids, batch.attention_mask, batch.text_mask, causal=causal, prefix=prefix
        )
        last = hidden[torch.arange(hidden.shape[0]), lengths - 1]
    else:
        mask = batch.attention_mask if prefix is None else with_prefix_mask(batch.attention_mask, prefix)
        out = run_decoder(
            model,
            input_ids=batch.input_ids,
            attention_mask=mask,
            attention=settings.attention,  # type: ignore[arg-type]
            use_cache=keep_kv,
            cache=None if prefix is None else prefix.dynamic_cache(batch.input_ids.shape[0]),
        )
        hidden, text_mask, cache = out.last_hidden_state, batch.text_mask, out.cache
        last = last_token_pool(hidden)  # left padding puts every row's last token at -1
    pooled = _SINGLE_PASS_POOLING[rules.pooling](hidden, text_mask, last)
    return BatchEmbeddings(pooled[:, None], None, cache if keep_kv else None)  # (B, 1, D)
