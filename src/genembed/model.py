"""The one object ``genembed.load()`` returns: a loaded backbone that embeds (and, through the
generation modules, chats and reranks) with the same weights."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import torch

from .backbone.device import resolve_device
from .backbone.loading import Backbone
from .encoders.defaults import DEFAULT_MAX_LENGTH
from .encoders.embedder import encode_texts, to_output, validate_texts
from .encoders.encode_options import EncodeOverrides, split_overrides
from .encoders.inspect_tokens import SoftTokenStep, inspect_soft_tokens
from .encoders.instructions import DEFAULT_QUERY_INSTRUCTION, check_prompts, default_prompts, resolve_instruction
from .encoders.methods import DEFAULT_METHOD, DEFAULT_STEPS, DEFAULT_TAU, SOFT_TOKEN_METHOD, method_rules
from .encoders.prompts import EncodedPrompt
from .encoders.quantize import check_precision
from .encoders.settings import EmbedSettings, override_fields
from .encoders.similarity import check_similarity_fn
from .models.trained_for import TrainedFor, warn_if_untrained

if TYPE_CHECKING:
    from .generation.rerank import RerankOptions, RerankResult
    from .generation.sampling import SamplingKwargs, SamplingOptions

__all__ = ["DEFAULT_QUERY_INSTRUCTION", "GenerativeEmbedder"]


class GenerativeEmbedder:
    """A decoder LLM used as an embedding model (GIRCSE soft tokens, mean, last-token or GRIT pooling).

    Build it with :func:`genembed.load`. ``model.backbone`` exposes the underlying transformers model
    and tokenizer. It follows sentence-transformers' conventions (``encode_query``/``encode_document``,
    ``prompts``, ``similarity``, ``precision``, ``truncate_dim``), so code written for
    ``SentenceTransformer`` runs on it.

    Attributes:
        method, steps, attention, prompt_format, tau, max_length, center: the settings ``encode`` uses
            unless a call says otherwise: what ``genembed.load(...)`` takes by these names and
            :meth:`save` stores (checked by :meth:`check_settings`). ``pooling`` (read-only) follows
            from ``method``.
        prompts: named instructions, :data:`genembed.encoders.instructions.NAMED_INSTRUCTIONS` by
            default (``query``, ``document``, ``classification``, ``clustering``, ``text-matching``);
            ``None`` means "the caller's instruction". ``encode(prompt_name="query")`` uses ``prompts["query"]``.
        default_prompt_name: the prompt ``encode`` uses when given no instruction (None: none).
        similarity_fn_name: ``"cosine"`` (default), ``"dot"``, ``"euclidean"`` or ``"manhattan"``.
        truncate_dim: keep only the first ``truncate_dim`` dimensions of every embedding (None: all).

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
        tau: float = DEFAULT_TAU,
        adapter: str | None = None,
        center: bool = False,
        method: str = DEFAULT_METHOD,
        steps: int | str = DEFAULT_STEPS,
        attention: str | None = None,
        prompt_format: str | None = None,
        prompts: dict[str, str | None] | None = None,
        default_prompt_name: str | None = None,
        similarity_fn_name: str = "cosine",
        truncate_dim: int | None = None,
        max_length: int = DEFAULT_MAX_LENGTH,
    ):
        self.backbone = backbone
        self.tau = tau
        self.adapter = adapter
        # per-instruction centering by default in encode (genembed.encoders.centering); load() turns it
        # on for the shipped adapter
        self.center = center
        # generate/rerank with the LoRA adapter (True: a GRIT jointly trained adapter), with the base
        # weights (False: an embedding-only adapter) or with a generation adapter loaded beside it
        # ("generation"); see genembed.generation.adapters and docs/grit.md
        self.generation_adapter_name: str | None = None  # that adapter's name and folder, when loaded
        self.generation_adapter_path: str | None = None
        self.generation_adapter = False
        self.method, self.steps, self.attention, self.prompt_format = method, steps, attention, prompt_format
        self.max_length = max_length
        self.prompts = check_prompts(default_prompts() if prompts is None else prompts)
        self.default_prompt_name = default_prompt_name
        self.similarity_fn_name = similarity_fn_name
        self.truncate_dim = truncate_dim
        self.check_settings()
        # what the adapter was trained for (its saved training config; None: unknown or no adapter) and
        # where it lives; load() sets both (genembed.models.trained_for)
        self.trained_for: TrainedFor | None = None
        self.adapter_path: str | None = None

    def check_settings(self) -> EmbedSettings:
        """Check the settings the model holds (they are plain attributes: ``model.method = "mean"``); return
        the :class:`~genembed.encoders.settings.EmbedSettings` they give. :meth:`save` calls it before
        writing anything.

        Raises:
            ValueError: a bad setting (the message names it and, for a name, the valid choices).
            TypeError: ``prompts`` is not a dict of strings to strings or None.
        """
        settings = self.embed_settings()
        if not isinstance(self.center, bool):
            raise ValueError(f"center must be True or False, got {self.center!r}")
        _check_truncate_dim(self.truncate_dim)
        prompts = check_prompts(self.prompts)
        if self.default_prompt_name is not None and self.default_prompt_name not in prompts:
            raise ValueError(
                f"default_prompt_name {self.default_prompt_name!r} is not in this model's prompts {sorted(prompts)}"
            )
        check_similarity_fn(self.similarity_fn_name)
        return settings

    @property
    def pooling(self) -> str:
        """How the model's method pools (``soft_tokens``, ``mean`` or ``last``; :mod:`genembed.encoders.methods`):
        not a setting of its own, it follows from :attr:`method`."""
        return method_rules(self.method).pooling

    @property
    def name(self) -> str:
        """Backbone name plus adapter, used in cache keys and reports."""
        return self.backbone.name + (f"+{self.adapter}" if self.adapter else "")

    @property
    def generation_adapter(self) -> bool | str:
        """The weights chat, reranking and RAG run on: False (the base weights), True (the embedding
        adapter, for a jointly trained one) or ``"generation"`` (the generation adapter loaded with
        ``genembed.load(generation_adapter=...)``)."""
        return self._generation_adapter

    @generation_adapter.setter
    def generation_adapter(self, value: bool | str) -> None:
        from .generation.adapters import GENERATION_ADAPTER

        if isinstance(value, str):
            if value != GENERATION_ADAPTER or self.generation_adapter_name is None:
                raise ValueError(
                    f"generation_adapter must be True, False or {GENERATION_ADAPTER!r} with a generation adapter "
                    f"loaded (genembed.load(generation_adapter=FOLDER)); got {value!r}"
                )
        elif not isinstance(value, bool):
            raise TypeError(f"generation_adapter must be a bool or {GENERATION_ADAPTER!r}, got {type(value).__name__}")
        self._generation_adapter = value

    @property
    def generation_weights(self) -> str:
        """The weights :meth:`generate`, :meth:`rerank` and RAG answers run on, in words (see
        :attr:`generation_adapter`), e.g. ``"SmolLM2-135M-Instruct + adapter smollm2-135m-gircse"``."""
        from .generation.adapters import generation_weights_label

        return generation_weights_label(self)

    @property
    def dim(self) -> int:
        """Embedding dimension (the backbone's hidden size)."""
        return int(self.backbone.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.model.parameters()).device

    @property
    def similarity_fn_name(self) -> str:
        """What :meth:`similarity` computes: ``cosine``, ``dot``, ``euclidean`` or ``manhattan``."""
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: str) -> None:
        self._similarity_fn_name = check_similarity_fn(value)

    def get_sentence_embedding_dimension(self) -> int:
        """The length of the vectors ``encode`` returns (``truncate_dim`` when set, else :attr:`dim`)."""
        return min(self.dim, self.truncate_dim) if self.truncate_dim else self.dim

    def to(self, device: str | torch.device) -> GenerativeEmbedder:
        """Move the model to ``device`` (``"auto"``: CUDA, then MPS, then the CPU); returns the model."""
        self.backbone.model.to(resolve_device(device))
        return self

    def encode(
        self,
        texts: str | list[str],
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | None = None,
        normalize_embeddings: bool | None = None,
        truncate_dim: int | None = None,
        settings: EmbedSettings | None = None,
        return_all_steps: bool = False,
        return_steps_used: bool = False,
        prompts: list[EncodedPrompt] | None = None,
        **overrides: Unpack[EncodeOverrides],
    ) -> Any:
        """Embed texts.

        The keywords are sentence-transformers' (``SentenceTransformer.encode`` code runs unchanged); the
        model's settings (``steps``, ``method``, ``center``, ...) are changed for one call by keyword
        (:class:`~genembed.encoders.encode_options.EncodeOverrides`) or replaced by ``settings``.

        Args:
            texts: one string (gives one vector) or a list (gives an ``(n, dim)`` array).
            prompt_name: a key of ``model.prompts``, e.g. ``"query"``; an explicit instruction wins.
            prompt: the instruction, what the embedding should capture, e.g. "Classify the emotion of the
                text" (``instruction=`` is the same keyword). "" for none. None: ``prompts[prompt_name]``,
                else ``prompts[default_prompt_name]``, else none.
            batch_size: texts per forward pass (texts are sorted by length first). None: the settings'
                (``DEFAULT_BATCH_SIZE``, 32).
            show_progress_bar: None shows one for more than 8 batches.
            precision: ``"float32"``, ``"int8"``, ``"uint8"``, ``"binary"`` or ``"ubinary"``, as
                sentence-transformers' ``quantize_embeddings`` makes them (:mod:`genembed.encoders.quantize`;
                int8/uint8 ranges come from the texts of this call, so they need two or more).
            convert_to_numpy: numpy arrays (default) or, when False, one torch tensor.
            convert_to_tensor: one torch tensor (wins over ``convert_to_numpy``).
            device: move the model to this device first (``"auto"``, ``"cpu"``, ``"cuda:0"``, ...); it stays there.
            normalize_embeddings: L2-normalize the embeddings (default True; ``normalize=`` is the same keyword).
            truncate_dim: keep the first ``truncate_dim`` dimensions (None: ``model.truncate_dim``),
                normalised after truncation when normalising.
            settings: embed with these :class:`~genembed.encoders.settings.EmbedSettings` instead of the
                model's own (the keywords below still change them).
            return_all_steps: GIRCSE only: ``(n, K, dim)`` holding ``z_1..z_K`` from one run.
            return_steps_used: with ``steps="auto"``, also return the steps each text used.
            prompts: the texts' prompts, already tokenized with this call's settings and instruction
                (:meth:`~genembed.encoders.settings.EmbedSettings.prompts`), one per text, so that a caller
                that counted their tokens does not tokenize them again.
            **overrides: settings for this call, None or absent meaning the model's own
                (:meth:`embed_settings` resolves them; :data:`~genembed.encoders.encode_options.ALIASES`
                lists the two spellings):
            steps: GIRCSE soft tokens K (``model.steps``, ``DEFAULT_STEPS`` by default), or ``"auto"`` to stop
                each text when ``cos(z_k, z_{k-1}) > stop_tol`` (at most ``max_steps``). Ignored by
                single-pass methods.
            method: one of :data:`genembed.encoders.methods.METHODS`.
            attention: ``"causal"`` (default) or ``"bidirectional"``; some methods fix it (GRIT is
                always bidirectional; see :mod:`genembed.encoders.methods`).
            prompt_format: ``"chat"``, ``"plain"``, ``"gircse"`` (the official GIRCSE code's) or
                ``"gritlm"`` (GritLM's); default: the model's, else the method's own (chat for GIRCSE,
                plain otherwise); see :mod:`genembed.encoders.prompts`.
            tau: GIRCSE soft-token softmax temperature (``model.tau``, 1.0 unless loaded otherwise).
            max_length: tokens per prompt (``model.max_length``, 512); longer texts are cut from the end
                (the instruction is kept).
            center: subtract the instruction's center, the mean embedding of the bundled calibration
                texts made with the same instruction and settings (:mod:`genembed.encoders.centering`:
                stored with the model for its named instructions, else cached in memory and on disk,
                else computed by encoding those 64 texts once). Default ``model.center``
                (on for the shipped adapter). With ``normalize=False`` the result is
                ``normalize(z) - center``.
            batch_tokens: 0 (default, ``batch_size`` texts per pass), or a budget of padded tokens that lets a
                batch of short texts grow past ``batch_size`` (changes no embedding; see
                :mod:`genembed.encoders.batching`).
            cache_prefix: compute each instruction prefix (template and instruction before the text) once
                and keep its states in the model's bounded cache (default True; same embeddings up to
                rounding; :mod:`genembed.encoders.prefix_cache`).

        Returns:
            ``(n, dim)`` embeddings (``(dim,)`` for one string), or ``(embeddings, steps_used)``.

        Raises:
            TypeError: an item of ``texts`` is not a string (the message names its index), or an unknown
                keyword (the message lists the settings).
            ValueError: a bad ``steps``, ``method``, ``attention``, ``prompt_name``, ``precision`` or
                other setting, or two spellings of one keyword that disagree.

        Warns:
            UntrainedAdapterWarning: the loaded adapter was trained for another method or attention
                (read from its saved training config; see :mod:`genembed.models.trained_for`).
        """
        keywords, changes = split_overrides(overrides, prompt=prompt, normalize_embeddings=normalize_embeddings)
        center = changes.pop("center", None)
        instruction = resolve_instruction(
            self.prompts,
            prompt=keywords["prompt"],
            prompt_name=prompt_name,
            default_prompt_name=self.default_prompt_name,
        )
        normalize = True if keywords["normalize_embeddings"] is None else bool(keywords["normalize_embeddings"])
        changes["batch_size"] = batch_size
        settings = self.embed_settings(**changes) if settings is None else settings.override(**changes)
        method = settings.method
        warn_if_untrained(self.trained_for, self.adapter, settings.method, settings.attention)
        check_precision(precision)
        truncate_dim = _check_truncate_dim(self.truncate_dim if truncate_dim is None else truncate_dim)
        if return_all_steps and (not method_rules(method).uses_steps or settings.adaptive):
            raise ValueError(f"return_all_steps needs method={SOFT_TOKEN_METHOD!r} and a fixed number of steps")
        if return_all_steps and precision != "float32":
            raise ValueError("return_all_steps gives float32 embeddings only; quantize each step yourself")
        if device is not None:
            self.to(device)
        items, single = validate_texts(texts)
        embeddings, used = encode_texts(
            self.backbone,
            items,
            settings,
            instruction=instruction,
            return_all_steps=return_all_steps,
            show_progress_bar=show_progress_bar,
            prompts=prompts,
        )
        if self.center if center is None else center:
            from .encoders.centering import apply_center, instruction_center

            shift = instruction_center(self.backbone, settings, instruction, all_steps=return_all_steps)
            embeddings = apply_center(embeddings, shift)
        convert_to_numpy = convert_to_numpy and not convert_to_tensor
        out = to_output(
            embeddings,
            normalize=normalize,
            convert_to_numpy=convert_to_numpy,
            single=single,
            truncate_dim=truncate_dim,
            precision=precision,
        )
        if return_steps_used:
            if used is None:
                used = torch.full((len(items),), method_rules(method).steps(settings.steps))
            used_out = used.numpy() if convert_to_numpy else used
            return out, (used_out[0] if single else used_out)
        return out

    def embed_settings(self, **changes: Any) -> EmbedSettings:
        """The settings :meth:`encode` embeds with: the model's own (``method``, ``steps``, ``attention``,
        ``prompt_format``, ``tau``, ``max_length``, as :meth:`save` records them), changed by ``changes``
        (:func:`~genembed.encoders.settings.override_fields`: None keeps the model's; another method
        brings its own attention and prompt format, the model's belonging to its own method).

        Every path that embeds with a loaded model (the CLI's ``encode``, ``index build``, ``eval``,
        ``serve``, ``mine-negatives``) builds its settings here, so a saved model's settings hold
        unless an option says otherwise.

        Args:
            **changes: :class:`~genembed.encoders.settings.EmbedSettings` fields (``method``, ``steps``
                or ``"auto"``, ``max_length``, ``batch_size``, ...) and ``max_steps`` (the cap of
                ``steps="auto"``).

        Raises:
            ValueError: a bad setting (the message names it).
        """
        own = {"method": self.method, "steps": self.steps, "attention": self.attention}
        own |= {"prompt_format": self.prompt_format, "tau": self.tau, "max_length": self.max_length}
        return EmbedSettings.build(**override_fields(own, changes))

    def encode_query(self, texts: str | list[str], **kwargs: Any) -> Any:
        """:meth:`encode` with ``prompt_name="query"`` (:data:`DEFAULT_QUERY_INSTRUCTION` unless
        ``model.prompts`` says otherwise) when no instruction, prompt or prompt name is given."""
        return self.encode(texts, **_named_side(kwargs, self.prompts, ("query",)))

    def encode_document(self, texts: str | list[str], **kwargs: Any) -> Any:
        """:meth:`encode` with ``prompt_name="document"`` (no instruction unless ``model.prompts`` says
        otherwise) when no instruction, prompt or prompt name is given."""
        return self.encode(texts, **_named_side(kwargs, self.prompts, ("document", "passage", "corpus")))

    def similarity(self, a: Any, b: Any, *, similarity_fn_name: str | None = None) -> torch.Tensor:
        """``(n, m)`` similarity matrix of two sets of embeddings (one vector counts as one row), by
        ``model.similarity_fn_name`` unless given: cosine, dot, or negative euclidean / manhattan distance."""
        from .encoders.similarity import similarity

        return similarity(a, b, similarity_fn_name or self.similarity_fn_name)

    def similarity_pairwise(self, a: Any, b: Any, *, similarity_fn_name: str | None = None) -> torch.Tensor:
        """``(n,)`` similarity of ``a[i]`` with ``b[i]`` (see :meth:`similarity`)."""
        from .encoders.similarity import similarity_pairwise

        return similarity_pairwise(a, b, similarity_fn_name or self.similarity_fn_name)

    def save(
        self,
        folder: str | os.PathLike,
        *,
        save_backbone: bool | None = None,
        scores: dict[str, float] | None = None,
    ) -> Path:
        """Write the model to ``folder`` so that ``genembed.load(folder)`` restores it with its settings.

        Writes the LoRA adapter (when there is one) with its training config, ``genembed.json``
        (method, steps, tau, prompt format, centering, prompts, backbone), a model card (``README.md``)
        and, with centering on, ``centers.safetensors`` (the named instructions' centers, computed now
        if not yet known), atomically, with no absolute path of this machine; see :mod:`genembed.models.save`.
        The settings are checked first (:meth:`check_settings`): an invalid one writes nothing.

        Args:
            folder: the folder to write (replaced if it holds an earlier save).
            save_backbone: also write the backbone's weights and tokenizer. None: only when the backbone
                cannot be found by name on another machine (built in memory, or loaded from a local
                folder or .gguf file).
            scores: task name: score (x100), shown in the model card.

        Returns:
            The folder.

        Raises:
            ValueError: a bad setting (nothing is written), or ``folder`` holds something else.
        """
        from .models.save import save_model

        return save_model(self, folder, save_backbone=save_backbone, scores=scores)

    def inspect(
        self,
        text: str,
        *,
        instruction: str | None = None,
        steps: int | None = None,
        top: int = 8,
        prompt_format: str | None = None,
        max_length: int | None = None,
    ) -> list[SoftTokenStep]:
        """Per GIRCSE step, the ``top`` most probable vocabulary tokens of the soft token ``p_k``
        (``steps`` None: ``model.steps``; ``max_length`` None: the model's tokens per prompt)."""
        settings = self.embed_settings(
            method=SOFT_TOKEN_METHOD, steps=steps, prompt_format=prompt_format, max_length=max_length
        )
        return inspect_soft_tokens(self.backbone, text, settings, instruction=instruction or "", top=top)

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


def _check_truncate_dim(truncate_dim: Any) -> int | None:
    """``truncate_dim`` when it is a positive int or None; ValueError otherwise."""
    if truncate_dim is not None and (
        isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1
    ):
        raise ValueError(f"truncate_dim must be a positive int or None, got {truncate_dim!r}")
    return truncate_dim


def _named_side(kwargs: dict[str, Any], prompts: dict[str, str | None], names: tuple[str, ...]) -> dict[str, Any]:
    """``kwargs`` with ``prompt_name`` set to the first of ``names`` in ``prompts``, unless they already
    choose an instruction (sentence-transformers' ``encode_query``/``encode_document``)."""
    if any(kwargs.get(key) is not None for key in ("instruction", "prompt", "prompt_name")):
        return kwargs
    side = next((name for name in names if name in prompts), None)
    return {**kwargs, "prompt_name": side}
