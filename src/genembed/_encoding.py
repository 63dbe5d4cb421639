"""Encoding, the collaborator :class:`genembed.GenerativeEmbedder` embeds through: ``encode``
(sentence-transformers' keywords; the steps after the core in :class:`~genembed.encoders.output.OutputPipeline`),
``encode_query`` / ``encode_document``, ``similarity`` and ``inspect``. It holds no model: each method takes
the model it embeds for (its ``backbone``, ``settings`` and what its adapter was trained for), and the model
hands its public methods here (:func:`genembed._delegate.delegate`)."""

from __future__ import annotations

from typing import Any, Protocol, Unpack

import torch

from .encoders.embedder import encode_texts, validate_texts
from .encoders.encode_options import EncodeOverrides, split_overrides
from .encoders.inspect_tokens import SoftTokenStep, inspect_soft_tokens
from .encoders.instructions import resolve_instruction
from .encoders.methods import SOFT_TOKEN_METHOD, method_rules
from .encoders.model_settings import ModelSettings
from .encoders.output import apply_output
from .encoders.settings import EmbedSettings
from .models.trained_for import TrainedFor, warn_if_untrained

__all__ = ["EmbeddingModel", "Encoding"]


class EmbeddingModel(Protocol):
    """What :class:`Encoding` reads of a model (:class:`genembed.GenerativeEmbedder` is one)."""

    backbone: Any
    settings: ModelSettings
    adapter: str | None
    trained_for: TrainedFor | None

    @property
    def dim(self) -> int: ...

    def to(self, device: str) -> Any: ...

    def encode(self, texts: str | list[str], **kwargs: Any) -> Any: ...

    def embed_settings(self, **changes: Any) -> EmbedSettings: ...


class Encoding:
    """``encode`` and its companions (see :class:`genembed.GenerativeEmbedder`), for the model each call
    names: over its ``backbone``, its settings and what its adapter was trained for."""

    def get_sentence_embedding_dimension(self, model: EmbeddingModel) -> int:
        """The length of the vectors ``encode`` returns (``truncate_dim`` when set, else :attr:`dim`)."""
        return min(model.dim, model.settings.truncate_dim) if model.settings.truncate_dim else model.dim

    def encode(
        self,
        model: EmbeddingModel,
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
            tokenized: the texts' prompts, already tokenized with this call's settings and instruction
                (:func:`~genembed.encoders.prompts.tokenize`), one per text, so that a caller
                that counted their tokens does not tokenize them again (``prompts=``, its former name, is
                deprecated: ``model.prompts`` are the named instructions).
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
        tokenized = keywords.get("tokenized")
        instruction = resolve_instruction(
            model.settings.prompts,
            prompt=keywords["prompt"],
            prompt_name=prompt_name,
            default_prompt_name=model.settings.default_prompt_name,
        )
        normalize = True if keywords["normalize_embeddings"] is None else bool(keywords["normalize_embeddings"])
        output = {"truncate_dim": truncate_dim, "normalize": normalize, "precision": precision}
        call = model.settings.call_settings(settings, changes | output | {"batch_size": batch_size})  # checked now
        settings = call.embed
        method = settings.method
        # stacklevel: warn_if_untrained, this method, the model's (genembed._delegate), the caller
        warn_if_untrained(model.trained_for, model.adapter, settings.method, settings.attention, stacklevel=4)
        if return_all_steps and (not method_rules(method).uses_steps or settings.adaptive):
            raise ValueError(f"return_all_steps needs method={SOFT_TOKEN_METHOD!r} and a fixed number of steps")
        if return_all_steps and precision != "float32":
            raise ValueError("return_all_steps gives float32 embeddings only; quantize each step yourself")
        if device is not None:
            model.to(device)
        items, single = validate_texts(texts)
        embeddings, used = encode_texts(
            model.backbone,
            items,
            settings,
            run=call.run,
            instruction=instruction,
            return_all_steps=return_all_steps,
            show_progress_bar=show_progress_bar,
            prompts=tokenized,
        )
        embeddings = apply_output(
            call.output, model.backbone, embeddings, settings, instruction, all_steps=return_all_steps
        )
        convert_to_numpy = convert_to_numpy and not convert_to_tensor
        out = embeddings[0] if single else embeddings
        out = out.numpy() if convert_to_numpy else out
        if return_steps_used:
            if used is None:
                used = torch.full((len(items),), method_rules(method).steps(settings.steps))
            used_out = used.numpy() if convert_to_numpy else used
            return out, (used_out[0] if single else used_out)
        return out

    def embed_settings(self, model: EmbeddingModel, **changes: Any) -> EmbedSettings:
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
        return model.settings.embed_settings(**changes)

    def encode_query(self, model: EmbeddingModel, texts: str | list[str], **kwargs: Any) -> Any:
        """:meth:`encode` with ``prompt_name="query"`` (:data:`DEFAULT_QUERY_INSTRUCTION` unless
        ``model.prompts`` says otherwise) when no instruction, prompt or prompt name is given."""
        return model.encode(texts, **_named_side(kwargs, model.settings.prompts, ("query",)))

    def encode_document(self, model: EmbeddingModel, texts: str | list[str], **kwargs: Any) -> Any:
        """:meth:`encode` with ``prompt_name="document"`` (no instruction unless ``model.prompts`` says
        otherwise) when no instruction, prompt or prompt name is given."""
        return model.encode(texts, **_named_side(kwargs, model.settings.prompts, ("document", "passage", "corpus")))

    def similarity(
        self, model: EmbeddingModel, a: Any, b: Any, *, similarity_fn_name: str | None = None
    ) -> torch.Tensor:
        """``(n, m)`` similarity matrix of two sets of embeddings (one vector counts as one row), by
        ``model.similarity_fn_name`` unless given: cosine, dot, or negative euclidean / manhattan distance."""
        from .encoders.similarity import similarity

        return similarity(a, b, similarity_fn_name or model.settings.similarity_fn_name)

    def similarity_pairwise(
        self, model: EmbeddingModel, a: Any, b: Any, *, similarity_fn_name: str | None = None
    ) -> torch.Tensor:
        """``(n,)`` similarity of ``a[i]`` with ``b[i]`` (see :meth:`similarity`)."""
        from .encoders.similarity import similarity_pairwise

        return similarity_pairwise(a, b, similarity_fn_name or model.settings.similarity_fn_name)

    def inspect(
        self,
        model: EmbeddingModel,
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
        settings = model.embed_settings(
            method=SOFT_TOKEN_METHOD, steps=steps, prompt_format=prompt_format, max_length=max_length
        )
        return inspect_soft_tokens(model.backbone, text, settings, instruction=instruction or "", top=top)


def _named_side(kwargs: dict[str, Any], prompts: dict[str, str | None], names: tuple[str, ...]) -> dict[str, Any]:
    """``kwargs`` with ``prompt_name`` set to the first of ``names`` in ``prompts``, unless they already
    choose an instruction (sentence-transformers' ``encode_query``/``encode_document``)."""
    if any(kwargs.get(key) is not None for key in ("instruction", "prompt", "prompt_name")):
        return kwargs
    side = next((name for name in names if name in prompts), None)
    return {**kwargs, "prompt_name": side}
