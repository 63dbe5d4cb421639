"""A LangChain ``Embeddings`` backed by a genembed model (``pip install 'genembed[langchain]'``).

>>> from genembed.integrations.langchain import GenembedEmbeddings
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> store = InMemoryVectorStore.from_texts(["Photosynthesis turns light into sugar."], GenembedEmbeddings())
>>> store.similarity_search("how do plants make food?", k=1)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from ._sides import EmbeddingSides

if TYPE_CHECKING:
    from ..model import GenerativeEmbedder

__all__ = ["GenembedEmbeddings"]


class GenembedEmbeddings(Embeddings):
    """LangChain embeddings: ``embed_query`` uses the model's query instruction, ``embed_documents`` its
    document side, like :meth:`~genembed.GenerativeEmbedder.encode_query` / ``encode_document``.

    The async methods (``aembed_query``, ``aembed_documents``) are LangChain's: the sync ones in a worker
    thread; a lock lets one call at a time use the model.

    Args:
        model: a loaded model, or what :func:`genembed.load` takes (None: the bundled default), loaded now.
        options: keywords of :class:`~genembed.integrations._sides.EmbeddingSides`:
            ``query_instruction`` (None: ``model.prompts["query"]``), ``document_instruction`` (None:
            ``model.prompts["document"]``), ``batch_size`` (32), ``encode_kwargs`` (further ``encode``
            settings, e.g. ``{"steps": 10}``) and ``load_kwargs`` (further :func:`genembed.load` settings,
            e.g. ``{"device": "cuda"}``).
    """

    def __init__(self, model: GenerativeEmbedder | str | os.PathLike | None = None, **options: Any):
        self.sides = EmbeddingSides(model, **options)
        self.model = self.sides.model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents (one vector per text)."""
        return self.sides.documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.sides.queries([text])[0]
