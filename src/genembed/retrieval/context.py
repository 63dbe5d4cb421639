"""How a RAG prompt is laid out, and which of its parts come from cached KV states.

The prompt is a *head*, a row of *segments* and a short chat *tail* (their text:
:mod:`genembed.generation.rag_prompt`):

    doc_first:    [head] [passage 1] ... [passage k] [query] [tail]
    query_first:  [head] [query] [passage k] ... [passage 1] [tail]

(passage 1 the best retrieved: with the question first, the bundled model answers from the passage
nearest the answer, so the best one goes last; docs/rag.md.)

Caching modes (GRIT's names) say which segments come from KV states made before the question was
asked; the order says where they sit:

==========  ====================  ====================================================
mode        order                 cached (head included) / computed when answering
==========  ====================  ====================================================
none        doc_first (default)   nothing cached; every token computed causally
            or query_first
query       doc_first (default)   query cached; passages, then tail computed
            or query_first
doc         doc_first (default)   passages cached; query and tail computed
            or query_first
querydoc    query_first           query and passages cached; only the tail computed
docquery    doc_first             passages and query cached; only the tail computed
==========  ====================  ====================================================

GRIT puts the query first for query caching; with the bundled 135M model, answers with the question
first were right far less often (docs/rag.md), so every mode that allows it defaults to doc_first.

A cached segment's states come from one causal pass of the generation weights over ``head + segment``
(:mod:`genembed.retrieval.kv_segment`): positions ``h .. h + L - 1``. Segments sit back to back after
the head; a cached segment's keys are rotated from where they were computed to their place
(``shift_keys``), values are reused unchanged. Computed segments before a cached one are run into
the cache first (e.g. ``query`` in doc_first order: passages computed, then the query's states
appended). What caching changes: a cached segment attended to the head but not to the segments
before it (isolation). The first segment after the head is exact: its states equal those of a full
causal pass (tested to 1e-4 in float32). ``recompute`` recomputes a share of the isolated tokens
(:mod:`genembed.retrieval.kv_blend`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..backbone.attention import run_decoder
from .kv_blend import blend
from .kv_ops import KV, build_cache, shift_keys

__all__ = ["MODES", "ORDERS", "Context", "Segment", "assemble", "isolation_note", "mode_layout"]

MODES = ("none", "query", "doc", "querydoc", "docquery")
ORDERS = ("doc_first", "query_first")
_MODE_LAYOUT = {  # mode -> (default order, order fixed by the name, query cached, passages cached)
    "none": ("doc_first", False, False, False),
    "query": ("doc_first", False, True, False),
    "doc": ("doc_first", False, False, True),
    "querydoc": ("query_first", True, True, True),
    "docquery": ("doc_first", True, True, True),
}


def mode_layout(mode: str, order: str | None = None) -> tuple[str, bool, bool]:
    """``(order, query cached, passages cached)`` of a caching mode.

    Args:
        mode: one of :data:`MODES`.
        order: ``doc_first`` or ``query_first``; None for the mode's default. ``querydoc`` and
            ``docquery`` fix it by their names.

    Raises:
        ValueError: an unknown mode or order, or an order that contradicts the mode.
    """
    if mode not in MODES:
        raise ValueError(f"cache mode must be one of {', '.join(MODES)}, got {mode!r}")
    if order is not None and order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    default, fixed, query_cached, docs_cached = _MODE_LAYOUT[mode]
    if fixed and order is not None and order != default:
        raise ValueError(f"cache mode {mode!r} puts the {default.replace('_first', '')} first; order={order!r}")
    return order or default, query_cached, docs_cached


def isolation_note(mode: str, order: str | None, passages: int) -> str | None:
    """What a caching mode gives up against plain RAG in the same order, or None when its prompt's states
    equal a full causal pass (``none``; ``query`` with the query first; ``doc`` with one passage first).

    Raises:
        ValueError: an unknown mode or order (:func:`mode_layout`).
    """
    order, query_cached, docs_cached = mode_layout(mode, order)
    isolated = []
    if docs_cached and (order == "query_first" or passages > 1):
        isolated.append("the passages after the first" if order == "doc_first" else "the passages")
    if query_cached and order == "doc_first":
        isolated.append("the question")
    if not isolated:
        return None
    return (
        f"--kv-cache {mode} ({order}) reuses states computed apart: {' and '.join(isolated)} never attended to "
        "what stands before them, so answers can differ from plain RAG's (measured loss: docs/rag.md, 'Caching "
        "modes on 15 factual passages'); --recompute 0.2 narrows it, --kv-cache none is exact"
    )


@dataclass
class Segment:
    """One segment: its token ids and, when it comes from a cache, its KV states computed at positions
    ``at .. at + L - 1`` (``at`` = the head's length for a segment computed after the head). The head is
    the segment named ``"head"``: cached segments after another segment are isolated from it."""

    name: str
    ids: list[int]
    kv: KV | None = None
    at: int = 0


@dataclass
class Context:
    """A RAG prompt ready for decoding.

    Attributes:
        cache: a transformers cache holding every position before ``fresh_ids`` (None when empty).
        fresh_ids: the tokens left to compute when generating (the last computed segments, then the tail).
        cached_tokens: positions whose states came from KV states made beforehand (not computed here).
        layout: ``(name, start, stop, cached)`` per segment and for the tail, in prompt order.
        prefilled: computed positions already in ``cache`` (segments before a cached one).
        recomputed: cached positions whose states were recomputed in place (``assemble``'s ``recompute``).
    """

    cache: Any
    fresh_ids: list[int]
    cached_tokens: int
    layout: list[tuple[str, int, int, bool]]
    prefilled: int = 0
    recomputed: int = 0

    @property
    def past_tokens(self) -> int:
        """Positions held by ``cache``."""
        return self.cached_tokens + self.prefilled

    @property
    def total_tokens(self) -> int:
        return self.past_tokens + len(self.fresh_ids)


def assemble(model: Any, segments: list[Segment], tail: list[int], *, recompute: float = 0.0) -> Context:
    """Place segments back to back from position 0 and build the cache up to the last cached segment.

    Cached segments (those with ``kv``) have their keys rotated from where they were computed
    (``Segment.at``) to their place and are cast to the model's dtype; computed segments before a
    cached one are run through ``model`` (causal) into the cache first. Run it with the generation
    weights active (:func:`~genembed.generation.adapters.adapter_mode`).

    Args:
        recompute: share of the isolated cached tokens (in cached segments placed after a segment other
            than the head) to recompute through every layer, those isolation changed most
            (:func:`~genembed.retrieval.kv_blend.blend`); 0 keeps every cached state, 1 gives a full pass.

    Raises:
        ValueError: states whose length is not the segment's, or a share outside ``[0, 1]``.
    """
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    cache, past, cached_tokens = None, 0, 0
    layout: list[tuple[str, int, int, bool]] = []
    pending: list[int] = []
    placed: list[int] = []  # ids in the cache, by position
    isolated: list[int] = []  # cached positions that did not attend to the segments before them
    for seg in segments:
        if not seg.ids:  # e.g. a prompt without a head
            continue
        cached = seg.kv is not None
        if cached:
            keys, values = seg.kv  # type: ignore[misc]
            if keys.shape[2] != len(seg.ids) or values.shape[2] != len(seg.ids):
                raise ValueError(f"segment {seg.name!r}: {keys.shape[2]} cached positions for {len(seg.ids)} tokens")
            if pending:
                cache = _prefill(model, cache, pending, past)
                placed.extend(pending)
                past, pending = past + len(pending), []
            if any(name != "head" for name, *_ in layout):
                isolated.extend(range(past, past + len(seg.ids)))
            placed.extend(seg.ids)
            keys = shift_keys(model, keys.to(dtype), past - seg.at).to(device)
            cache = _append(cache, keys, values.to(dtype).to(device))
            past, cached_tokens = past + len(seg.ids), cached_tokens + len(seg.ids)
        else:
            pending.extend(seg.ids)
        start = layout[-1][2] if layout else 0
        layout.append((seg.name, start, start + len(seg.ids), cached))
    start = layout[-1][2] if layout else 0
    layout.append(("tail", start, start + len(tail), False))
    cache, recomputed = blend(model, cache, placed, isolated, recompute)  # checks the share; 0: unchanged
    return Context(
        cache, pending + list(tail), cached_tokens, layout, prefilled=past - cached_tokens, recomputed=len(recomputed)
    )


def _append(cache: Any, keys: torch.Tensor, values: torch.Tensor) -> Any:
    """``cache`` with ``(layers, H, L, Dh)`` states appended (a new cache when ``cache`` is None)."""
    if cache is None:
        return build_cache([(keys, values)])
    for layer in range(keys.shape[0]):
        cache.update(keys[layer][None], values[layer][None], layer)
    return cache


@torch.inference_mode()
def _prefill(model: Any, cache: Any, ids: list[int], past: int) -> Any:
    """Run ``ids`` at positions ``past ..`` causally on top of ``cache``; return the extended cache."""
    from transformers import DynamicCache

    cache = cache if cache is not None else DynamicCache()
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    run_decoder(
        model,
        input_ids=input_ids,
        attention_mask=torch.ones((1, past + len(ids)), dtype=torch.long, device=device),
        position_ids=torch.arange(past, past + len(ids), device=device)[None],
        cache=cache,
        use_cache=True,
    )
    return cache


def fresh_input(context: Context, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, position_ids)`` for decoding ``context.fresh_ids`` after its cache."""
    n, past = len(context.fresh_ids), context.past_tokens
    input_ids = torch.tensor([context.fresh_ids], dtype=torch.long, device=device)
    mask = torch.ones((1, past + n), dtype=torch.long, device=device)
    positions = torch.arange(past, past + n, device=device)[None]
    return input_ids, mask, positions
