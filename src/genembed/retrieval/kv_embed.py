"""Embed texts the way an index does and keep each text's KV states from that same pass.

The KV states are those of the text's whole prompt (template, instruction and text; for GIRCSE not the
soft tokens), computed with the method's attention at positions ``0 .. L-1``. A RAG prompt reuses the
span of them that is its segment only when this pass is the generator's own (same weights, causal
attention, same tokens; see :mod:`genembed.retrieval.kv_segment`). Embeddings match
:meth:`genembed.GenerativeEmbedder.encode` with the same settings (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..encoders.embedder import embed_prompts
from ..encoders.output import OutputPipeline
from ..encoders.prompts import tokenize
from ..encoders.settings import EmbedSettings, IndexEmbedSettings, RunOptions
from .kv_ops import KV, stacked_states

__all__ = ["EncodedTexts", "encode_with_kv"]


@dataclass
class EncodedTexts:
    """``embeddings`` ``(n, D)`` L2-normalized float32 (centred and truncated as the index's settings say:
    :class:`~genembed.encoders.settings.IndexEmbedSettings`); ``ids`` each text's prompt token ids; ``kv`` each
    text's ``(keys, values)`` ``(layers, kv_heads, len(ids), head_dim)`` (None unless asked for)."""

    embeddings: np.ndarray
    ids: list[list[int]]
    kv: list[KV] | None = None


@torch.inference_mode()
def encode_with_kv(
    backbone: Any,
    texts: list[str],
    settings: IndexEmbedSettings | EmbedSettings,
    *,
    kind: str = "doc",
    keep_kv: bool = True,
    batch_size: int = 16,
    kv_dtype: torch.dtype | None = None,
) -> EncodedTexts:
    """Embed ``texts`` as documents (``kind="doc"``) or queries and keep their KV states.

    Args:
        backbone: a :class:`~genembed.backbone.loading.Backbone`.
        texts: the texts (for chunks: ``title + " " + text``).
        settings: the index's settings (an :class:`~genembed.encoders.settings.EmbedSettings`: its
            defaults, or the index fields given to it the former way).
        kind: ``"doc"`` or ``"query"`` (chooses the instruction).
        keep_kv: return KV states (costs memory: see :func:`genembed.retrieval.kv_store.kv_bytes_per_token`).
        batch_size: texts per forward pass.
        kv_dtype: cast the returned states (e.g. ``torch.float16`` for storage).
    """
    index = IndexEmbedSettings.of(settings)
    instruction = index.instruction(kind)
    prompts = tokenize(backbone.tokenizer, texts, instruction, index.embed)
    kv: list[KV | None] = [None] * len(texts)

    def keep(indices: list[int], batch: Any, out: Any) -> None:
        width = batch.input_ids.shape[1]
        for row, i in enumerate(indices):
            keys, values = stacked_states(out.cache, row, width - len(prompts[i].ids), width)
            if kv_dtype is not None:
                keys, values = keys.to(kv_dtype), values.to(kv_dtype)
            kv[i] = (keys.cpu(), values.cpu())

    # the transformers pass (not the CPU fast path) gives the KV states, and the embeddings with them;
    # without them the fast path and the cached instruction prefixes apply, as in encode
    run = RunOptions(batch_size=batch_size, fast_path=not keep_kv)
    callback = keep if keep_kv else None
    embeddings, _ = embed_prompts(
        backbone, prompts, index.embed, run=run, keep_kv=keep_kv, on_batch=callback, progress=False
    )
    output = OutputPipeline.of_index(index)
    vectors = output(backbone, embeddings, index.embed, instruction).numpy().astype(np.float32)
    return EncodedTexts(vectors, [p.ids for p in prompts], kv if keep_kv else None)  # type: ignore[arg-type]
