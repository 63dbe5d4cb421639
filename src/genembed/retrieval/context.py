"""How a RAG prompt is laid out, and which of its parts come from cached KV states.

The prompt is a row of *segments* followed by a short chat *tail*:

    query_first:  [query] [passage 1] ... [passage k] [tail]
    doc_first:    [passage 1] ... [passage k] [query] [tail]

A segment's tokens are exactly the tokens of its embedding prompt (for a passage: ``title + " " + text``
in the index's prompt format; for the query: its instruction and text), so its KV states from the
embedding pass can stand in for computing it again. The tail is a chat turn asking for the answer and
ends with the assistant prompt.

Caching modes (GRIT's names):

==========  ===========  ===========================================================
mode        order        from the embedding passes / computed when generating
==========  ===========  ===========================================================
none        either       nothing cached; every token computed causally in one pass
query       query_first  query cached; passages and tail computed
doc         doc_first    passages cached; query and tail computed
querydoc    query_first  query and passages cached; only the tail computed
docquery    doc_first    passages and query cached; only the tail computed
==========  ===========  ===========================================================

Placement: segments sit back to back from position 0. A cached segment was computed alone at positions
``0..L-1``; its keys are rotated to its place (``shift_keys``), values are reused unchanged. What caching
changes, and costs in quality: (1) a cached segment did not attend to the segments before it (each was
encoded alone), and (2) with a bidirectional embedding method (``grit``) its tokens also attended to the
tokens after them within the segment, which causal generation never does. The first segment at
position 0 with a causal method is exact: its states equal those of a full causal pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .kv_ops import KV, build_cache, shift_keys

__all__ = ["MODES", "ORDERS", "Context", "Segment", "assemble", "mode_layout", "tail_ids"]

MODES = ("none", "query", "doc", "querydoc", "docquery")
ORDERS = ("query_first", "doc_first")
_MODE_LAYOUT = {  # mode -> (order, query cached, passages cached)
    "query": ("query_first", True, False),
    "querydoc": ("query_first", True, True),
    "doc": ("doc_first", False, True),
    "docquery": ("doc_first", True, True),
}
TAIL_INSTRUCTION = "Answer the question above using the passages."


def mode_layout(mode: str, order: str | None = None) -> tuple[str, bool, bool]:
    """``(order, query cached, passages cached)`` of a caching mode.

    Args:
        mode: one of :data:`MODES`.
        order: only for ``none``: ``query_first`` (default, as in GritLM) or ``doc_first``.

    Raises:
        ValueError: an unknown mode or order, or an order that contradicts the mode.
    """
    if mode not in MODES:
        raise ValueError(f"cache mode must be one of {', '.join(MODES)}, got {mode!r}")
    if order is not None and order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if mode == "none":
        return order or "query_first", False, False
    layout = _MODE_LAYOUT[mode]
    if order is not None and order != layout[0]:
        raise ValueError(f"cache mode {mode!r} puts the {layout[0].replace('_first', '')} first; order={order!r}")
    return layout


@dataclass
class Segment:
    """One segment: its token ids and, when it comes from a cache, its KV states at positions ``0..L-1``."""

    name: str
    ids: list[int]
    kv: KV | None = None


@dataclass
class Context:
    """A RAG prompt ready for decoding.

    Attributes:
        cache: a transformers cache with the cached segments at their positions (None when nothing is cached).
        fresh_ids: the tokens to compute when generating (segments not cached, then the tail).
        cached_tokens: positions held by ``cache``.
        layout: ``(name, start, stop, cached)`` per segment and for the tail, in prompt order.
    """

    cache: Any
    fresh_ids: list[int]
    cached_tokens: int
    layout: list[tuple[str, int, int, bool]]

    @property
    def total_tokens(self) -> int:
        return self.cached_tokens + len(self.fresh_ids)


def tail_ids(tokenizer: Any) -> list[int]:
    """The closing chat turn: a newline, a user turn asking for the answer, and the assistant prompt.

    The turn is rendered by the tokenizer's chat template without a system turn (on a small seeded
    sample of WikiQA questions the default model answered better without one; see docs/rag.md).
    Without a chat template the tail is plain text ending in ``Answer:``.
    """
    if not getattr(tokenizer, "chat_template", None):
        return tokenizer(f"\n\n{TAIL_INSTRUCTION}\nAnswer:", add_special_tokens=False)["input_ids"]
    system = [{"role": "system", "content": ""}]
    user = [*system, {"role": "user", "content": TAIL_INSTRUCTION}]
    with_user = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    system_only = tokenizer.apply_chat_template(system, tokenize=False)
    # rendered alone, a user turn would get the template's default system prompt (SmolLM2 adds one)
    turn = with_user[len(system_only) :] if with_user.startswith(system_only) else with_user
    return tokenizer("\n" + turn, add_special_tokens=False)["input_ids"]


def assemble(model: Any, segments: list[Segment], tail: list[int]) -> Context:
    """Place segments back to back from position 0 and split them into cache and fresh tokens.

    Cached segments (those with ``kv``) must come first; their keys are rotated from ``0..L-1`` to
    their place and all states cast to the model's dtype.

    Raises:
        ValueError: a cached segment after a fresh one, or states whose length is not the segment's.
    """
    dtype = next(model.parameters()).dtype
    states: list[KV] = []
    layout: list[tuple[str, int, int, bool]] = []
    fresh: list[int] = []
    offset = 0
    for seg in segments:
        cached = seg.kv is not None
        if cached:
            if fresh:
                raise ValueError(f"cached segment {seg.name!r} follows a computed one: cached segments come first")
            keys, values = seg.kv  # type: ignore[misc]
            if keys.shape[2] != len(seg.ids) or values.shape[2] != len(seg.ids):
                raise ValueError(f"segment {seg.name!r}: {keys.shape[2]} cached positions for {len(seg.ids)} tokens")
            keys, values = keys.to(dtype), values.to(dtype)
            states.append((shift_keys(model, keys, offset), values))
        else:
            fresh.extend(seg.ids)
        layout.append((seg.name, offset, offset + len(seg.ids), cached))
        offset += len(seg.ids)
    layout.append(("tail", offset, offset + len(tail), False))
    fresh.extend(tail)
    cached_tokens = sum(k.shape[2] for k, _ in states)
    device = next(model.parameters()).device
    cache = build_cache([(k.to(device), v.to(device)) for k, v in states]) if states else None
    return Context(cache, fresh, cached_tokens, layout)


def fresh_input(context: Context, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, position_ids)`` for decoding ``context.fresh_ids`` after its cache."""
    n, past = len(context.fresh_ids), context.cached_tokens
    input_ids = torch.tensor([context.fresh_ids], dtype=torch.long, device=device)
    mask = torch.ones((1, past + n), dtype=torch.long, device=device)
    positions = torch.arange(past, past + n, device=device)[None]
    return input_ids, mask, positions
