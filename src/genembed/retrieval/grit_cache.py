"""GRIT's own RAG caching, for indexes embedded in GritLM's format (``prompt_format="gritlm"``).

GritLM reuses the KV states of its *embedding* pass (bidirectional, ``BOS <|embed|>\\n{text}``) when it
generates, instead of computing a passage or the question again (Muennighoff et al., 2024, section
"RAG with caching"; github.com/ContextualAI/gritlm, README "Caching" and ``rag/eval.py``). The cached
states come first, exactly as computed (each from position 0, not rotated), and the generation prompt
that follows says where the query and the passage are:

==========  =====================================  =========================================================
mode        cached, in this order                  computed when answering
==========  =====================================  =========================================================
none        nothing                                ``BOS<|user|>\\n{query}\\n\\n{passages}\\n\\nOptionally using
                                                   the prior context answer the query prior to it\\n<|assistant|>\\n``
query       the query's embedding pass             ``\\n<|user|>\\n{passages}\\n\\nOptionally using the prior
                                                   context answer the query prior to it\\n<|assistant|>\\n``
doc         the passages' embedding passes         ``\\n<|user|>\\n{query}\\n\\nAnswer the prior query while
                                                   optionally using the context prior to it\\n<|assistant|>\\n``
querydoc    query, then the passages (no BOS,      ``\\n<|user|>\\nOptionally using the prior context answer
            ``\\n<|embed|>\\n{passage}``)            the query prior to it\\n<|assistant|>\\n``
docquery    the passages, then the query           ``\\n<|user|>\\nAnswer the prior query while optionally
                                                   using the context prior to it\\n<|assistant|>\\n``
==========  =====================================  =========================================================

The passages' states are the index's stored ones (``index build --store-kv``: the embedding pass
itself, so storing them costs no extra pass). ``querydoc`` places passages after the query without a
second BOS, as GritLM's code does; their states are computed at question time (the same bidirectional
pass over ``\\n<|embed|>\\n{passage}``), as its ``rag/eval.py`` does, since the index stores the ``doc``
variant. A passage is shown as ``title text``; several passages are joined by a blank line (GritLM's
evaluation uses one).
"""

from __future__ import annotations

from typing import Any

import torch

from ..backbone.attention import run_decoder
from .context import Context, Segment, assemble
from .kv_ops import KV, stacked_states
from .kv_source import KVSourceError, generation_weights

__all__ = ["GRIT_FORMAT", "check_grit_kv_source", "grit_context", "grit_kv_source", "uses_grit_cache"]

GRIT_FORMAT = "gritlm"
_OPTIONAL = "Optionally using the prior context answer the query prior to it"
_ANSWER = "Answer the prior query while optionally using the context prior to it"
_TAILS = {  # GritLM's CACHE_FORMAT_* (README, rag/eval.py)
    "query": "\n<|user|>\n{passages}\n\n" + _OPTIONAL + "\n<|assistant|>\n",
    "doc": "\n<|user|>\n{query}\n\n" + _ANSWER + "\n<|assistant|>\n",
    "querydoc": "\n<|user|>\n" + _OPTIONAL + "\n<|assistant|>\n",
    "docquery": "\n<|user|>\n" + _ANSWER + "\n<|assistant|>\n",
}
_NO_CACHE = "<|user|>\n{query}\n\n{passages}\n\n" + _OPTIONAL + "\n<|assistant|>\n"  # FULL_FORMAT_NO_EMBED
_QUERYDOC_PASSAGE = "\n<|embed|>\n"  # a passage after the cached query: no BOS, a newline first


def uses_grit_cache(settings: Any) -> bool:
    """Whether an index with these embedding settings answers with GRIT's caching formats."""
    return settings.prompt_format == GRIT_FORMAT


def grit_kv_source(model: Any) -> dict[str, Any]:
    """The manifest's ``kv.source`` for stored states of GritLM-format embedding passes."""
    return {**generation_weights(model), "attention": "bidirectional", "format": GRIT_FORMAT, "pass": "embedding"}


def check_grit_kv_source(stored: dict[str, Any] | None, model: Any, *, index: Any) -> None:
    """Raise :class:`~genembed.retrieval.kv_source.KVSourceError` unless ``stored`` holds GritLM-format
    embedding-pass states of the weights ``model`` generates with."""
    wanted = grit_kv_source(model)
    if stored != wanted:
        raise KVSourceError(
            f"index {index} stores KV states of {stored}, but GRIT caching with the loaded model needs {wanted}. "
            f"Rebuild it with `genembed index build ... --out {index} --store-kv --overwrite` with this model."
        )


def grit_context(model: Any, index: Any, query: Any, sources: list[Any], mode: str) -> Context:
    """The RAG prompt of ``mode`` in GritLM's formats (module docstring), ready for decoding.

    Args:
        model: the :class:`~genembed.GenerativeEmbedder` the index was built with.
        index: the index (with stored KV states for ``doc`` and ``docquery``).
        query: the question's :class:`~genembed.retrieval.rag.Query`, with its embedding pass's states
            for the modes that cache it.
        sources: the retrieved passages (``row`` and ``id`` of each).
        mode: ``none``, ``query``, ``doc``, ``querydoc`` or ``docquery``.

    Raises:
        ValueError: an unknown mode, missing stored states, or a query without its embedding states.
        KVSourceError: the stored states are not this model's GritLM-format embedding passes.
    """
    tok = model.backbone.tokenizer
    texts = [index.text(s.row) for s in sources]
    passages = "\n\n".join(texts)
    if mode == "none":
        ids = tok(_NO_CACHE.format(query=query.text, passages=passages))["input_ids"]  # with BOS, as GritLM
        return assemble(model.backbone.model, [], ids)
    if mode not in _TAILS:
        raise ValueError(f"cache mode must be one of none, {', '.join(_TAILS)}, got {mode!r}")
    if mode != "doc" and query.kv is None:
        raise ValueError("GRIT query caching needs the query's embedding states (retrieve with keep_query_kv)")
    q_seg = Segment("query", query.ids, query.kv)
    if mode == "querydoc":
        d_segs = _querydoc_passages(model, sources, texts)
    elif mode in ("doc", "docquery"):
        if not index.has_kv:
            raise ValueError(f"index {index.where} stores no KV states: rebuild it with --store-kv for doc caching")
        check_grit_kv_source(index.kv_source, model, index=index.where)
        doc_ids = index.settings.prompt_ids(tok, texts, "doc")
        d_segs = [Segment(s.id, ids, index.kv(s.row, tokens=len(ids))) for s, ids in zip(sources, doc_ids, strict=True)]
    else:
        d_segs = []
    segments = {"query": [q_seg], "doc": d_segs, "querydoc": [q_seg, *d_segs], "docquery": [*d_segs, q_seg]}[mode]
    at = 0
    for seg in segments:  # GritLM concatenates the caches as computed: no key rotation
        seg.at, at = at, at + len(seg.ids)
    tail = tok(_TAILS[mode].format(query=query.text, passages=passages), add_special_tokens=False)["input_ids"]
    return assemble(model.backbone.model, segments, tail)


@torch.inference_mode()
def _querydoc_passages(model: Any, sources: list[Any], texts: list[str]) -> list[Segment]:
    """Passages as ``\\n<|embed|>\\n{passage}`` without BOS, through the bidirectional embedding pass."""
    lm, tok = model.backbone.model, model.backbone.tokenizer
    device = next(lm.parameters()).device
    segments = []
    for source, text in zip(sources, texts, strict=True):
        ids = tok(_QUERYDOC_PASSAGE + text, add_special_tokens=False)["input_ids"]
        input_ids = torch.tensor([ids], device=device)
        mask = torch.ones_like(input_ids)
        out = run_decoder(lm, input_ids=input_ids, attention_mask=mask, attention="bidirectional", use_cache=True)
        kv: KV = stacked_states(out.cache, 0, 0, len(ids))
        segments.append(Segment(source.id, ids, kv))
    return segments
