"""A LlamaIndex ``BaseEmbedding`` backed by a genembed model (``pip install 'genembed[llamaindex]'``).

>>> from llama_index.core import Document, Settings, VectorStoreIndex
>>> from genembed.integrations.llama_index import GenembedEmbedding
>>> Settings.embed_model = GenembedEmbedding()
>>> index = VectorStoreIndex.from_documents([Document(text="Photosynthesis turns light into sugar.")])
>>> index.as_retriever(similarity_top_k=1).retrieve("how do plants make food?")
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

from ..encoders.defaults import DEFAULT_BATCH_SIZE
from ._sides import EmbeddingSides

__all__ = ["GenembedEmbedding"]


class GenembedEmbedding(BaseEmbedding):
    """LlamaIndex embeddings: queries with the model's query instruction, texts (nodes, documents) with
    its document side, like :meth:`~genembed.GenerativeEmbedder.encode_query` / ``encode_document``.

    Batches of ``embed_batch_size`` texts go to the model in one call; the async methods run the sync
    ones in a worker thread, and a lock lets one call at a time use the model.

    Args:
        model: a loaded :class:`~genembed.GenerativeEmbedder`, or what :func:`genembed.load` takes
            (None: the bundled default), loaded now.
        query_instruction: instruction for queries (None: ``model.prompts["query"]``).
        document_instruction: instruction for texts (None: ``model.prompts["document"]``).
        embed_batch_size: texts per call (LlamaIndex's batching) and per forward pass.
        encode_kwargs: further ``encode`` settings, e.g. ``{"steps": 10}``.
        load_kwargs: further :func:`genembed.load` settings, e.g. ``{"device": "cuda"}``.
    """

    _sides: EmbeddingSides = PrivateAttr()

    def __init__(
        self,
        model: Any = None,
        *,
        query_instruction: str | None = None,
        document_instruction: str | None = None,
        embed_batch_size: int = DEFAULT_BATCH_SIZE,
        encode_kwargs: dict[str, Any] | None = None,
        load_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        sides = EmbeddingSides(
            model,
            query_instruction=query_instruction,
            document_instruction=document_instruction,
            batch_size=embed_batch_size,
            encode_kwargs=encode_kwargs,
            load_kwargs=load_kwargs,
        )
        super().__init__(model_name=sides.model.name, embed_batch_size=embed_batch_size, **kwargs)
        self._sides = sides

    @classmethod
    def class_name(cls) -> str:
        return "GenembedEmbedding"

    @property
    def model(self) -> Any:
        """The :class:`~genembed.GenerativeEmbedder` in use."""
        return self._sides.model

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._sides.queries([query])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._sides.documents([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._sides.documents(texts)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
