"""The one object ``genembed.load()`` returns: a loaded backbone that embeds (and, through the
generation modules, chats and reranks) with the same weights.

It holds what decides its vectors (one :class:`~genembed.encoders.model_settings.ModelSettings`) and the
weights (``backbone``, the adapters' names), and hands the work to collaborators that hold no model:
encoding (:class:`genembed._encoding.Encoding`), generation (:class:`genembed._generation.Generation`) and
persistence (:class:`genembed._persistence.Persistence`), through :func:`genembed._delegate.delegate`;
search delegates to :mod:`genembed.retrieval`. docs/architecture.md draws the way of ``load`` and
``encode`` file by file."""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any, Self

import torch

from ._delegate import delegate
from ._encoding import Encoding
from ._generation import Generation
from ._persistence import Persistence
from .backbone.device import resolve_device
from .backbone.loading import Backbone
from .encoders.instructions import DEFAULT_QUERY_INSTRUCTION
from .encoders.model_settings import ModelSettings
from .models.trained_for import TrainedFor

if TYPE_CHECKING:
    from .encoders.settings import EmbedSettings
    from .generation.weights import GenerationWeights

__all__ = ["DEFAULT_QUERY_INSTRUCTION", "GenerativeEmbedder"]


class GenerativeEmbedder:
    """A decoder LLM used as an embedding model (GIRCSE soft tokens, mean, last-token or GRIT pooling).

    Build it with :func:`genembed.load`. ``model.backbone`` exposes the underlying transformers model
    and tokenizer. It follows sentence-transformers' conventions (``encode_query``/``encode_document``,
    ``prompts``, ``similarity``, ``precision``, ``truncate_dim``), so code written for
    ``SentenceTransformer`` runs on it.

    Attributes:
        settings: what decides the vectors (:class:`~genembed.encoders.model_settings.ModelSettings`:
            method, steps, attention, prompt format, tau, max_length, centring, truncate_dim, the named
            instructions ``prompts``, ``default_prompt_name``, ``similarity_fn_name``): what
            ``genembed.load(...)`` takes by these names and :meth:`save` stores. Each is readable as
            ``model.method`` etc.; change them with :meth:`with_settings` or by assigning ``model.settings``
            (assigning ``model.method = "mean"`` still works, deprecated). ``encode`` uses them unless a
            call says otherwise; ``pooling`` (read-only) follows from ``method``.
        backbone: the underlying transformers model and tokenizer.

    Example:
        >>> model = genembed.load()
        >>> q = model.encode_query("how do plants make food?")
        >>> d = model.encode_document(["Photosynthesis turns light into sugar.", "Tax law is complex."])
        >>> model.similarity(q, d).argmax().item()
        0
    """

    def __init__(
        self,
        backbone: Backbone,
        *,
        adapter: str | None = None,
        settings: ModelSettings | None = None,
        adapter_path: str | None = None,
        trained_for: TrainedFor | None = None,
        generation_adapter: GenerationWeights | bool = "base",
        generation_adapter_name: str | None = None,
        generation_adapter_path: str | None = None,
        **fields: Any,
    ):
        """``fields``: :class:`~genembed.encoders.model_settings.ModelSettings` fields by name (or the whole
        ``settings``, not both). :func:`genembed.load` (:mod:`genembed.models.assemble`) gives the rest: where
        the adapter lives and what it was trained for (:mod:`genembed.models.trained_for`; None: unknown or no
        adapter), and the weights that generate (:attr:`generation_adapter`) with the generation adapter's
        name and folder when one is loaded."""
        if settings is not None and fields:
            raise TypeError(f"give settings or its fields {sorted(fields)}, not both")
        self.backbone = backbone
        self.adapter = adapter
        self.adapter_path = adapter_path
        self.trained_for = trained_for
        self.settings = ModelSettings(**fields) if settings is None else settings
        self.generation_adapter_name = generation_adapter_name
        self.generation_adapter_path = generation_adapter_path
        self.generation_adapter = generation_adapter

    @property
    def settings(self) -> ModelSettings:
        """What decides the vectors (see the class docstring); assigning it replaces them all."""
        return self._settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        if not isinstance(value, ModelSettings):
            raise TypeError(f"settings must be a ModelSettings, got {type(value).__name__}")
        self._settings = value

    def with_settings(self, **changes: Any) -> Self:
        """This model with ``changes`` to its :attr:`settings` (checked), as a new object over the same
        loaded weights: ``model.with_settings(method="mean", steps=3)``.

        Raises:
            ValueError / TypeError: a bad setting (the message names it); nothing changes.
        """
        changed = copy.copy(self)
        changed.settings = self._settings.replace(**changes)
        return changed

    def check_settings(self) -> EmbedSettings:
        """Check the settings again (the named instructions may have been changed in place,
        ``model.prompts["query"] = ...``); return the :class:`~genembed.encoders.settings.EmbedSettings`
        they give. :meth:`save` calls it before writing anything.

        Raises:
            ValueError: a bad setting (the message names it and, for a name, the valid choices).
            TypeError: ``prompts`` is not a dict of strings to strings or None.
        """
        self._settings = self._settings.replace()
        return self.embed_settings()

    @property
    def pooling(self) -> str:
        """How the model's method pools (``soft_tokens``, ``mean`` or ``last``; :mod:`genembed.encoders.methods`):
        not a setting of its own, it follows from :attr:`method`."""
        return self._settings.pooling

    @property
    def name(self) -> str:
        """Backbone name plus adapter, used in cache keys and reports."""
        return self.backbone.name + (f"+{self.adapter}" if self.adapter else "")

    @property
    def generation_adapter(self) -> GenerationWeights:
        """The weights chat, reranking and RAG run on: ``"base"``, ``"adapter"`` (the embedding adapter, for a
        jointly trained one) or ``"generation"`` (the generation adapter loaded with
        ``genembed.load(generation_adapter=...)``); see :mod:`genembed.generation.weights`. Setting True /
        False, the former spellings of ``"adapter"`` / ``"base"``, still works (deprecated)."""
        return self._generation_adapter

    @generation_adapter.setter
    def generation_adapter(self, value: GenerationWeights | bool) -> None:
        from .generation.weights import GENERATION, as_weights

        weights = as_weights(value)
        if weights == GENERATION and self.generation_adapter_name is None:
            raise ValueError(
                f"generation_adapter={GENERATION!r} is valid only with a generation adapter loaded "
                "(genembed.load(generation_adapter=FOLDER)); this model holds none"
            )
        self._generation_adapter = weights

    @property
    def generation_weights(self) -> str:
        """The weights :meth:`generate`, :meth:`rerank` and RAG answers run on, in words (see
        :attr:`generation_adapter`), e.g. ``"SmolLM2-135M-Instruct + adapter smollm2-135m-joint"``."""
        from .generation.adapters import generation_weights_label

        return generation_weights_label(self)

    @property
    def dim(self) -> int:
        """Embedding dimension (the backbone's hidden size)."""
        return int(self.backbone.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.model.parameters()).device

    def to(self, device: str | torch.device) -> GenerativeEmbedder:
        """Move the model to ``device`` (``"auto"``: CUDA, then MPS, then the CPU); returns the model."""
        self.backbone.model.to(resolve_device(device))
        return self

    # the collaborators: they hold no model (each method takes the model it works for), so the copy
    # with_settings makes shares them; a subclass or an instance may hold others
    _encoding = Encoding()
    _generation = Generation()
    _persistence = Persistence()

    encode = delegate(Encoding.encode, "_encoding")
    encode_query = delegate(Encoding.encode_query, "_encoding")
    encode_document = delegate(Encoding.encode_document, "_encoding")
    embed_settings = delegate(Encoding.embed_settings, "_encoding")
    get_sentence_embedding_dimension = delegate(Encoding.get_sentence_embedding_dimension, "_encoding")
    similarity = delegate(Encoding.similarity, "_encoding")
    similarity_pairwise = delegate(Encoding.similarity_pairwise, "_encoding")
    inspect = delegate(Encoding.inspect, "_encoding")
    generate = delegate(Generation.generate, "_generation")
    rerank = delegate(Generation.rerank, "_generation")
    save = delegate(Persistence.save, "_persistence")

    def search(
        self,
        query: str,
        corpus_or_index: Any,
        *,
        k: int = 10,
        rerank: bool = True,
        rerank_top: int | None = None,
        instruction: str | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        """Embedding retrieval over a list of texts or an index, then generative reranking of the top
        ``rerank_top`` (default ``k``). See :func:`genembed.retrieval.search.search` for all options."""
        from .retrieval.search import search  # the facade delegates up to the retrieval layer, lazily

        return search(
            self, query, corpus_or_index, k=k, rerank=rerank, rerank_top=rerank_top, instruction=instruction, **kwargs
        )

    def __repr__(self) -> str:
        centered = ", center=True" if self.center else ""
        return f"GenerativeEmbedder({self.name!r}, dim={self.dim}, device={self.device}{centered})"


def _setting(name: str) -> property:
    """``model.<name>``: a field of ``model.settings``; assigning it is the former way to change it (deprecated)."""

    def get(self: GenerativeEmbedder) -> Any:
        return getattr(self.settings, name)

    def set_(self: GenerativeEmbedder, value: Any) -> None:
        warnings.warn(
            f"model.{name} = ... is deprecated: use model.with_settings({name}=...) or assign model.settings",
            DeprecationWarning,
            stacklevel=2,
        )
        self.settings = self.settings.replace(**{name: value})

    return property(get, set_, doc=f"``settings.{name}`` (:class:`~genembed.encoders.model_settings.ModelSettings`).")


for _name in ModelSettings.fields_in("encode") + ModelSettings.fields_in(None):
    setattr(GenerativeEmbedder, _name, _setting(_name))
