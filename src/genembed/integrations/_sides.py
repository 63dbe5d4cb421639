"""What the framework integrations share: a genembed model (loaded on first use), how they embed the
query side and the document side, and a lock so that threads (async calls) take turns on the model."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..encoders.defaults import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from ..model import GenerativeEmbedder

__all__ = ["EmbeddingSides"]


class EmbeddingSides:
    """Embed queries and documents with one genembed model.

    Args:
        model: a loaded model, or what :func:`genembed.load` takes (None: the bundled default with its
            shipped adapter, a saved folder, a HF folder, a ``.gguf`` file or a cached hub id).
        query_instruction: instruction for queries (None: ``model.prompts["query"]``).
        document_instruction: instruction for documents (None: ``model.prompts["document"]``, none by default).
        batch_size: texts per forward pass.
        encode_kwargs: further :meth:`~genembed.GenerativeEmbedder.encode` settings, e.g. ``{"steps": 10}``.
        load_kwargs: further :func:`genembed.load` settings, e.g. ``{"device": "cuda"}``, when ``model`` is a name.
    """

    def __init__(
        self,
        model: GenerativeEmbedder | str | os.PathLike | None = None,
        *,
        query_instruction: str | None = None,
        document_instruction: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        encode_kwargs: dict[str, Any] | None = None,
        load_kwargs: dict[str, Any] | None = None,
    ):
        self.source = model
        self.query_instruction = query_instruction
        self.document_instruction = document_instruction
        self.batch_size = batch_size
        self.encode_kwargs = dict(encode_kwargs or {})
        self.load_kwargs = dict(load_kwargs or {})
        self._model: GenerativeEmbedder | None = None if _is_name(model) else model
        self._lock = threading.Lock()

    @property
    def model(self) -> GenerativeEmbedder:
        """The model, loaded on first use."""
        with self._lock:
            if self._model is None:
                import genembed

                self._model = genembed.load(self.source, **self.load_kwargs)
            return self._model

    @property
    def name(self) -> str:
        """The model's name (the name it will be loaded by, before it is loaded)."""
        return self._model.name if self._model is not None else str(self.source or "genembed-default")

    def queries(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of queries, as plain lists of floats."""
        return self._encode("encode_query", texts, self.query_instruction)

    def documents(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of documents, as plain lists of floats."""
        return self._encode("encode_document", texts, self.document_instruction)

    def _encode(self, side: str, texts: list[str], instruction: str | None) -> list[list[float]]:
        model = self.model
        with self._lock:
            vectors = getattr(model, side)(
                list(texts),
                instruction=instruction,
                batch_size=self.batch_size,
                show_progress_bar=False,
                **self.encode_kwargs,
            )
        return vectors.tolist()


def _is_name(model: Any) -> bool:
    return model is None or isinstance(model, str | os.PathLike)
