"""Embed texts the way an index does and keep each text's KV states from that same pass.

The KV states are those of the text's whole prompt (template, instruction and text; for GIRCSE not the
soft tokens), computed with the method's attention at positions ``0 .. L-1``. A RAG prompt reuses the
span of them that is its segment only when this pass is the generator's own (same weights, causal
attention, same tokens; see :mod:`genembed.retrieval.segment_kv`). Embeddings match
:meth:`genembed.GenerativeEmbedder.encode` with the same settings (tested).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ..backbone.attention import run_decoder
from ..encoders.batching import collate, length_sorted_batches
from ..encoders.centering import apply_centre, centre
from ..encoders.embedder import EncodeOptions
from ..encoders.methods import DEFAULT_METHOD, method_rules
from ..encoders.pooling import last_token_pool, masked_mean
from ..encoders.prompts import encode_prompts
from ..encoders.soft_tokens import generate_soft_tokens
from .kv_ops import KV, stacked_states

__all__ = ["EmbedConfig", "EncodedTexts", "encode_with_kv"]

_DEFAULT_QUERY_INSTRUCTION = "Given a query, retrieve relevant passages."


@dataclass(frozen=True)
class EmbedConfig:
    """How an index embeds its chunks and queries (stored in the index manifest)."""

    method: str = DEFAULT_METHOD  # a name in genembed.encoders.methods.METHODS
    steps: int = 5  # GIRCSE soft tokens K
    attention: str = "causal"  # ignored by methods with a fixed attention (grit)
    prompt_format: str = ""  # "" = the method's default (chat for gircse, plain otherwise)
    tau: float = 1.0  # GIRCSE softmax temperature
    max_length: int = 512  # tokens per prompt (template and title included); longer texts are cut
    query_instruction: str = _DEFAULT_QUERY_INSTRUCTION
    doc_instruction: str = ""
    center: bool = False  # subtract each instruction's centre (genembed.encoders.centering)

    def options(self, batch_size: int = 16) -> EncodeOptions:
        """Validated :class:`EncodeOptions` (raises ValueError on a bad setting)."""
        if isinstance(self.steps, bool) or not isinstance(self.steps, int):
            raise ValueError(f"an index needs a fixed number of GIRCSE steps, got {self.steps!r}")
        return EncodeOptions.build(
            method=self.method,
            steps=self.steps,
            attention=method_rules(self.method).attention(self.attention),
            prompt_format=self.prompt_format or None,
            tau=self.tau,
            max_length=self.max_length,
            batch_size=batch_size,
        )

    @property
    def segment_attention(self) -> str:
        """The attention the stored KV states were computed with."""
        return self.options().attention

    def instruction(self, kind: str) -> str:
        if kind not in ("query", "doc"):
            raise ValueError(f"kind must be 'query' or 'doc', got {kind!r}")
        return self.query_instruction if kind == "query" else self.doc_instruction

    def prompt_ids(self, tokenizer: Any, texts: list[str], kind: str) -> list[list[int]]:
        """Token ids of each text's embedding prompt: the segment it contributes to a RAG context."""
        options = self.options()
        prompts = encode_prompts(
            tokenizer,
            texts,
            instruction=self.instruction(kind),
            prompt_format=options.prompt_format,
            max_length=options.max_length,
        )
        return [p.ids for p in prompts]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbedConfig:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class EncodedTexts:
    """``embeddings`` ``(n, D)`` L2-normalized float32; ``ids`` each text's prompt token ids; ``kv`` each
    text's ``(keys, values)`` ``(layers, kv_heads, len(ids), head_dim)`` (None unless asked for)."""

    embeddings: np.ndarray
    ids: list[list[int]]
    kv: list[KV] | None = None


@torch.inference_mode()
def encode_with_kv(
    backbone: Any,
    texts: list[str],
    config: EmbedConfig,
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
        config: the index's embedding settings.
        kind: ``"doc"`` or ``"query"`` (chooses the instruction).
        keep_kv: return KV states (costs memory: see :func:`genembed.retrieval.kv_store.kv_bytes_per_token`).
        batch_size: texts per forward pass.
        kv_dtype: cast the returned states (e.g. ``torch.float16`` for storage).
    """
    model, tokenizer = backbone.model, backbone.tokenizer
    options = config.options(batch_size)
    device = next(model.parameters()).device
    prompts = encode_prompts(
        tokenizer,
        texts,
        instruction=config.instruction(kind),
        prompt_format=options.prompt_format,
        max_length=options.max_length,
    )
    dim = model.config.hidden_size
    embeddings = torch.zeros((len(texts), dim))
    kv: list[KV | None] = [None] * len(texts)
    for indices in length_sorted_batches([len(p.ids) for p in prompts], batch_size):
        batch = collate([prompts[i] for i in indices], tokenizer.pad_token_id).to(device)
        rules = method_rules(options.method)
        if rules.uses_steps:
            out = generate_soft_tokens(
                model,
                batch.input_ids,
                batch.attention_mask,
                steps=options.steps,
                tau=options.tau,
                attention=options.attention,
            )
            pooled, cache = out.hidden.mean(dim=1), out.cache  # z_K = mean(h_1..h_K)
        else:
            out = run_decoder(
                model,
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                attention=options.attention,
                use_cache=keep_kv,
            )
            hidden = out.last_hidden_state
            pooled = last_token_pool(hidden) if rules.pooling == "last" else masked_mean(hidden, batch.text_mask)
            cache = out.cache
        width = batch.input_ids.shape[1]
        for row, i in enumerate(indices):
            embeddings[i] = pooled[row].float().cpu()
            if keep_kv:
                keys, values = stacked_states(cache, row, width - len(prompts[i].ids), width)
                if kv_dtype is not None:
                    keys, values = keys.to(kv_dtype), values.to(kv_dtype)
                kv[i] = (keys.cpu(), values.cpu())
    if config.center:
        embeddings = apply_centre(embeddings, centre(backbone, options, config.instruction(kind)))
    normalized = torch.nn.functional.normalize(embeddings, dim=-1).numpy().astype(np.float32)
    return EncodedTexts(normalized, [p.ids for p in prompts], kv if keep_kv else None)  # type: ignore[arg-type]
