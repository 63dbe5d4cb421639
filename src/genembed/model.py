"""The one object ``genembed.load()`` returns: a loaded backbone that embeds (and, through the
generation modules, chats and reranks) with the same weights.

Its parts live beside it: the settings it holds (:class:`~genembed.encoders.model_settings.SettingsHolder`),
encoding (:mod:`genembed._encoding`) and persistence (:mod:`genembed._persistence`); generation and
search are here, delegating to :mod:`genembed.generation` and :mod:`genembed.retrieval`.
docs/architecture.md draws the way of ``load`` and ``encode`` file by file."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Unpack

import torch

from ._encoding import EncodingMethods
from ._persistence import Persistence
from .backbone.device import resolve_device
from .backbone.loading import Backbone
from .encoders.instructions import DEFAULT_QUERY_INSTRUCTION
from .encoders.model_settings import ModelSettings, SettingsHolder
from .models.trained_for import TrainedFor

if TYPE_CHECKING:
    from .generation.rerank import RerankOptions, RerankResult
    from .generation.sampling import SamplingKwargs, SamplingOptions
    from .generation.weights import GenerationWeights

__all__ = ["DEFAULT_QUERY_INSTRUCTION", "GenerativeEmbedder"]


class GenerativeEmbedder(SettingsHolder, EncodingMethods, Persistence):
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
        self, backbone: Backbone, *, adapter: str | None = None, settings: ModelSettings | None = None, **fields: Any
    ):
        """``fields``: :class:`~genembed.encoders.model_settings.ModelSettings` fields by name (or the whole
        ``settings``, not both)."""
        if settings is not None and fields:
            raise TypeError(f"give settings or its fields {sorted(fields)}, not both")
        self.backbone = backbone
        self.adapter = adapter
        self.settings = ModelSettings(**fields) if settings is None else settings
        # the weights generate/rerank run on: "base", "adapter" or "generation" (genembed.generation.weights;
        # load() decides them by its one rule, choose_weights)
        self.generation_adapter_name: str | None = None  # that adapter's name and folder, when loaded
        self.generation_adapter_path: str | None = None
        self.generation_adapter = "base"
        # what the adapter was trained for (its saved training config; None: unknown or no adapter) and
        # where it lives; load() sets both (genembed.models.trained_for)
        self.trained_for: TrainedFor | None = None
        self.adapter_path: str | None = None

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

    def generate(
        self,
        messages_or_prompt: str | list[dict],
        *,
        stream: bool = False,
        sampling: SamplingOptions | None = None,
        **options: Unpack[SamplingKwargs],
    ) -> str | Iterator[str]:
        """Chat with the weights :attr:`generation_weights` names (a jointly trained adapter generates with
        the weights that embed; with an embedding-only adapter the raw backbone's weights reply): the
        backbone's chat template (GritLM's format when the model's ``prompt_format`` is ``"gritlm"``),
        causal attention.

        Args:
            messages_or_prompt: a user prompt, or a conversation ``[{"role": "user", "content": ...}, ...]``.
            stream: return an iterator of text pieces instead of the whole reply.
            sampling: how the reply is decoded (:class:`~genembed.generation.sampling.SamplingOptions`, the
                one decoding configuration; None: its defaults), changed by these keywords:
            max_new_tokens: the most tokens to generate.
            temperature: 0 (default) decodes greedily and deterministically.
            top_p: nucleus sampling threshold (with ``temperature > 0``).
            seed: seed for reproducible sampling.
            repetition_penalty, no_repeat_ngram_size, frequency_penalty, presence_penalty: against
                repetition (the defaults keep greedy replies from looping; 1.0, 0, 0, 0 turn them off).
            stop: strings that end the reply; it is cut before the first one.

        Returns:
            The reply, or (``stream=True``) an iterator of pieces that join to it.

        Raises:
            TypeError / ValueError: malformed messages (the message names the index and field) or settings.

        Warns:
            BaseWeightsWarning: the reply comes from the raw backbone's weights while an adapter is loaded
                (an embedding-only adapter): the shipped default generates with its own adapter, or name a
                generation adapter (``genembed.load(generation_adapter=FOLDER)``). :attr:`generation_weights`
                names the weights that generate.
        """
        from .generation.adapters import BaseWeightsWarning, base_weights_note
        from .generation.chat import generate_pieces

        note = base_weights_note(self)
        if note is not None:
            warnings.warn(note.removeprefix("note: "), BaseWeightsWarning, stacklevel=2)

        pieces = generate_pieces(
            self.backbone,
            messages_or_prompt,
            sampling=sampling,
            use_adapter=self.generation_adapter,
            prompt_format=self.prompt_format,
            **options,
        )
        return pieces if stream else "".join(pieces)

    def rerank(self, query: str, documents: list[str], **options: Unpack[RerankOptions]) -> list[RerankResult]:
        """Order documents by relevance to the query, judged generatively by this model.

        Two scorings (:mod:`genembed.generation.rerank`). The default, ``"query_likelihood"`` (UPR): the
        mean log-probability of the query's tokens when the model is asked to write a query for the
        document. ``"yes_no"``: ``log P("Yes") - log P("No")`` at the answer to "Is the document
        relevant to the query?" (log-softmax over those two tokens). On scifact-dev with the bundled
        135M model, query likelihood lifted nDCG@10 of the top 10 from 22.3 to 31.3 while yes/no
        lowered it to 14.3 (docs/grit.md); yes/no needs a larger model.

        A model whose ``prompt_format`` is ``"gritlm"`` asks with the GRIT authors' prompt (``yes_no``) or in
        GritLM's chat turn (``query_likelihood``); see :mod:`genembed.generation.grit_rerank`.

        The options after ``documents`` are keyword-only (:class:`~genembed.generation.rerank.RerankOptions`).

        Args:
            query: the query.
            documents: candidate documents.
            top_n: return only the best ``top_n`` (default: all).
            instruction: task description opening the prompt, e.g. "Given a scientific claim, retrieve
                documents that support or refute the claim." (default: a generic relevance instruction).
            batch_size: documents per forward pass (default 8).
            max_length: document tokens kept (default ``DEFAULT_MAX_LENGTH``, 512): a longer document is cut
                from its end and scored on what is left, as Cohere's and Jina's rerank APIs do; none is
                refused. The query is cut to its first 256 tokens.
            scoring: ``"query_likelihood"`` (default) or ``"yes_no"`` (above).

        Returns:
            :class:`~genembed.generation.rerank.RerankResult` ``(index, score, document, probability)``
            items, best first; ``probability`` is in [0, 1]: ``P("Yes") / (P("Yes") + P("No"))`` for
            ``yes_no``, the posterior that the query was written for this document among the
            candidates (summing to 1 over them) for ``query_likelihood``.
        """
        from .generation.rerank import rerank

        return rerank(
            self.backbone,
            query,
            documents,
            use_adapter=self.generation_adapter,
            prompt_format=self.prompt_format,
            **options,
        )

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
