"""Haystack embedder components backed by a genembed model (``pip install 'genembed[haystack]'``).

``GenembedTextEmbedder`` embeds a query (``run(text) -> {"embedding"}``) with the model's query
instruction; ``GenembedDocumentEmbedder`` embeds documents (``run(documents) -> {"documents"}``, each
with ``embedding`` set) with its document side. The model loads in ``warm_up()`` (pipelines call it).

>>> from haystack import Document
>>> from genembed.integrations.haystack import GenembedDocumentEmbedder
>>> embedder = GenembedDocumentEmbedder()
>>> embedder.warm_up()
>>> embedder.run([Document(content="Photosynthesis turns light into sugar.")])["documents"][0].embedding
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from ..encoders.defaults import DEFAULT_BATCH_SIZE
from ._sides import EmbeddingSides

__all__ = ["GenembedDocumentEmbedder", "GenembedTextEmbedder"]


class _GenembedComponent:
    """The settings both components share; see :class:`GenembedTextEmbedder`.

    (``@component`` rebuilds the class it decorates, so subclasses call this class by name, not ``super()``.)
    """

    _query_side = False

    def __init__(
        self,
        model: Any = None,
        *,
        instruction: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        encode_kwargs: dict[str, Any] | None = None,
        load_kwargs: dict[str, Any] | None = None,
    ):
        self.model = model
        self.instruction = instruction
        self.batch_size = batch_size
        self.encode_kwargs = dict(encode_kwargs or {})
        self.load_kwargs = dict(load_kwargs or {})
        side = "query_instruction" if self._query_side else "document_instruction"
        self._sides = EmbeddingSides(
            model,
            batch_size=batch_size,
            encode_kwargs=self.encode_kwargs,
            load_kwargs=self.load_kwargs,
            **{side: instruction},
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The component :meth:`to_dict` describes."""
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Load the model (once)."""
        _ = self._sides.model

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component (for ``Pipeline.dumps``); needs ``model`` given by name or folder."""
        if not (self.model is None or isinstance(self.model, str | os.PathLike)):
            raise TypeError(
                f"{type(self).__name__} holds a loaded model object; give the model by name or folder to serialize it"
            )
        return default_to_dict(
            self,
            model=None if self.model is None else str(self.model),
            instruction=self.instruction,
            batch_size=self.batch_size,
            encode_kwargs=self.encode_kwargs,
            load_kwargs=self.load_kwargs,
        )


@component
class GenembedTextEmbedder(_GenembedComponent):
    """Embeds a query string with the model's query instruction.

    Args:
        model: a loaded :class:`~genembed.GenerativeEmbedder`, or what :func:`genembed.load` takes
            (None: the bundled default), loaded in ``warm_up()``.
        instruction: instruction for the text (None: ``model.prompts["query"]``).
        batch_size: texts per forward pass.
        encode_kwargs: further ``encode`` settings, e.g. ``{"steps": 10}``.
        load_kwargs: further :func:`genembed.load` settings, e.g. ``{"device": "cuda"}``.
    """

    _query_side = True

    @component.output_types(embedding=list[float], meta=dict[str, Any])
    def run(self, text: str) -> dict[str, Any]:
        """Embed ``text``: ``{"embedding": [...], "meta": {"model": name}}``.

        Raises:
            TypeError: ``text`` is not a string (use GenembedDocumentEmbedder for documents).
        """
        if not isinstance(text, str):
            raise TypeError(
                "GenembedTextEmbedder expects a string as input; to embed a list of Documents, "
                "use GenembedDocumentEmbedder"
            )
        self.warm_up()
        return {"embedding": self._sides.queries([text])[0], "meta": {"model": self._sides.name}}

    @component.output_types(embedding=list[float], meta=dict[str, Any])
    async def run_async(self, text: str) -> dict[str, Any]:
        """:meth:`run` in a worker thread."""
        return await asyncio.to_thread(self.run, text)


@component
class GenembedDocumentEmbedder(_GenembedComponent):
    """Embeds documents with the model's document side; returns copies with ``embedding`` set.

    Args:
        model: a loaded :class:`~genembed.GenerativeEmbedder`, or what :func:`genembed.load` takes
            (None: the bundled default), loaded in ``warm_up()``.
        instruction: instruction for the documents (None: ``model.prompts["document"]``, none by default).
        batch_size: documents per forward pass.
        encode_kwargs: further ``encode`` settings, e.g. ``{"steps": 10}``.
        load_kwargs: further :func:`genembed.load` settings, e.g. ``{"device": "cuda"}``.
            (``instruction`` to ``load_kwargs``: the keywords both components take.)
        meta_fields_to_embed: metadata fields whose values are put before the content, as Haystack's own
            document embedders do.
        embedding_separator: what joins those values and the content.
    """

    def __init__(
        self,
        model: Any = None,
        *,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        **options: Any,
    ):
        _GenembedComponent.__init__(self, model, **options)
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])
        self.embedding_separator = embedding_separator

    def to_dict(self) -> dict[str, Any]:
        data = _GenembedComponent.to_dict(self)
        data["init_parameters"].update(
            meta_fields_to_embed=self.meta_fields_to_embed, embedding_separator=self.embedding_separator
        )
        return data

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """Embed ``documents``: ``{"documents": [copies with embedding set], "meta": {"model": name}}``.

        Raises:
            TypeError: ``documents`` is not a list of Documents (use GenembedTextEmbedder for a string).
        """
        if not isinstance(documents, list) or not all(isinstance(d, Document) for d in documents):
            raise TypeError(
                "GenembedDocumentEmbedder expects a list of Documents as input; to embed a string, "
                "use GenembedTextEmbedder"
            )
        self.warm_up()
        texts = [self._text(document) for document in documents]
        vectors = self._sides.documents(texts) if texts else []
        embedded = [replace(document, embedding=v) for document, v in zip(documents, vectors, strict=True)]
        return {"documents": embedded, "meta": {"model": self._sides.name}}

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    async def run_async(self, documents: list[Document]) -> dict[str, Any]:
        """:meth:`run` in a worker thread."""
        return await asyncio.to_thread(self.run, documents)

    def _text(self, document: Document) -> str:
        meta = [
            str(document.meta[key])
            for key in self.meta_fields_to_embed
            if key in document.meta and document.meta[key] is not None
        ]
        return self.embedding_separator.join([*meta, document.content or ""])
