"""The one object ``genembed.load()`` returns: a loaded backbone that embeds (and, through the
generation modules, chats and reranks) with the same weights."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .adapter_info import TrainedFor, warn_if_untrained
from .backbone.loading import Backbone
from .encoders.embedder import EncodeOptions, encode_texts, to_output, validate_texts
from .encoders.inspect_tokens import SoftTokenStep, inspect_soft_tokens

if TYPE_CHECKING:
    from .generation.rerank import RerankResult

__all__ = ["DEFAULT_QUERY_INSTRUCTION", "GenerativeEmbedder"]

DEFAULT_QUERY_INSTRUCTION = "Given a query, retrieve relevant passages."


class GenerativeEmbedder:
    """A decoder LLM used as an embedding model (GIRCSE soft tokens, mean, last-token or GRIT pooling).

    Build it with :func:`genembed.load`. ``model.backbone`` exposes the underlying transformers model
    and tokenizer.

    Example:
        >>> model = genembed.load()
        >>> q = model.encode_query("how do plants make food?")
        >>> d = model.encode_document(["Photosynthesis turns light into sugar.", "Tax law is complex."])
        >>> (d @ q).argmax()
        0
    """

    def __init__(self, backbone: Backbone, *, tau: float = 1.0, adapter: str | None = None, center: bool = False):
        self.backbone = backbone
        self.tau = tau
        self.adapter = adapter
        # per-instruction centering by default in encode (genembed.encoders.centering); load() turns it
        # on for the shipped adapter
        self.center = center
        # generate/rerank with the LoRA adapter (True: a GRIT jointly trained adapter) or with the base
        # weights (False: an embedding-only adapter); see genembed.generation.adapters and docs/grit.md
        self.generation_adapter = False
        # what the adapter was trained for (its saved training config; None: unknown or no adapter) and
        # where it lives; load() sets both (genembed.adapter_info)
        self.trained_for: TrainedFor | None = None
        self.adapter_path: str | None = None

    @property
    def name(self) -> str:
        """Backbone name plus adapter, used in cache keys and reports."""
        return self.backbone.name + (f"+{self.adapter}" if self.adapter else "")

    @property
    def dim(self) -> int:
        """Embedding dimension (the backbone's hidden size)."""
        return int(self.backbone.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.model.parameters()).device

    def encode(
        self,
        texts: str | list[str],
        *,
        instruction: str | None = None,
        steps: int | str = 5,
        method: str = "gircse",
        attention: str | None = None,
        prompt_format: str | None = None,
        batch_size: int = 32,
        normalize: bool = True,
        max_length: int = 512,
        show_progress_bar: bool | None = None,
        convert_to_numpy: bool = True,
        return_all_steps: bool = False,
        max_steps: int = 20,
        stop_tol: float = 0.999,
        return_steps_used: bool = False,
        center: bool | None = None,
    ) -> Any:
        """Embed texts.

        Args:
            texts: one string (gives one vector) or a list (gives an ``(n, dim)`` array).
            instruction: what the embedding should capture, e.g. "Classify the emotion of the text".
                None or "" for none.
            steps: GIRCSE soft tokens K, or ``"auto"`` to stop each text when
                ``cos(z_k, z_{k-1}) > stop_tol`` (at most ``max_steps``). Ignored by single-pass methods.
            method: ``"gircse"``, ``"mean"``, ``"last"`` or ``"grit"``.
            attention: ``"causal"`` (default) or ``"bidirectional"``; ``grit`` is always bidirectional.
            prompt_format: ``"chat"`` (default for gircse) or ``"plain"`` (default otherwise); see
                :mod:`genembed.encoders.prompts`.
            batch_size: texts per forward pass (texts are sorted by length first).
            normalize: L2-normalize the embeddings.
            max_length: tokens per prompt; longer texts are cut from the end (the instruction is kept).
            show_progress_bar: None shows one for more than 8 batches.
            convert_to_numpy: numpy arrays (default) or torch tensors.
            return_all_steps: GIRCSE only: ``(n, K, dim)`` holding ``z_1..z_K`` from one run.
            return_steps_used: with ``steps="auto"``, also return the steps each text used.
            center: subtract the instruction's centre, the mean embedding of the bundled calibration
                texts made with the same instruction and settings (:mod:`genembed.encoders.centering`;
                the first call per instruction also encodes those 64 texts). None: ``model.center``
                (on for the shipped adapter). With ``normalize=False`` the result is
                ``normalize(z) - centre``.

        Returns:
            ``(n, dim)`` embeddings (``(dim,)`` for one string), or ``(embeddings, steps_used)``.

        Raises:
            TypeError: an item of ``texts`` is not a string (the message names its index).
            ValueError: a bad ``steps``, ``method``, ``attention`` or other setting.

        Warns:
            UntrainedAdapterWarning: the loaded adapter was trained for another method or attention
                (read from its saved training config; see :mod:`genembed.adapter_info`).
        """
        options = EncodeOptions.build(
            method=method,
            steps=steps,
            max_steps=max_steps,
            stop_tol=stop_tol,
            attention=attention,
            prompt_format=prompt_format,
            tau=self.tau,
            max_length=max_length,
            batch_size=batch_size,
        )
        warn_if_untrained(self.trained_for, self.adapter, options.method, options.attention)
        if return_all_steps and (method != "gircse" or options.adaptive):
            raise ValueError("return_all_steps needs method='gircse' and a fixed number of steps")
        items, single = validate_texts(texts)
        embeddings, used = encode_texts(
            self.backbone,
            items,
            options,
            instruction=instruction or "",
            return_all_steps=return_all_steps,
            show_progress_bar=show_progress_bar,
        )
        if self.center if center is None else center:
            from .encoders.centering import apply_centre, centre

            shift = centre(self.backbone, options, instruction or "", all_steps=return_all_steps)
            embeddings = apply_centre(embeddings, shift)
        out = to_output(embeddings, normalize=normalize, convert_to_numpy=convert_to_numpy, single=single)
        if return_steps_used:
            if used is None:
                used = torch.full((len(items),), options.steps if method == "gircse" else 1)
            used_out = used.numpy() if convert_to_numpy else used
            return out, (used_out[0] if single else used_out)
        return out

    def encode_query(self, texts: str | list[str], *, instruction: str | None = None, **kwargs: Any) -> Any:
        """:meth:`encode` with a query instruction (default :data:`DEFAULT_QUERY_INSTRUCTION`)."""
        return self.encode(
            texts, instruction=DEFAULT_QUERY_INSTRUCTION if instruction is None else instruction, **kwargs
        )

    def encode_document(self, texts: str | list[str], **kwargs: Any) -> Any:
        """:meth:`encode` with no instruction: documents are embedded as they are."""
        kwargs.pop("instruction", None)
        return self.encode(texts, instruction=None, **kwargs)

    def inspect(
        self,
        text: str,
        *,
        instruction: str | None = None,
        steps: int = 5,
        top: int = 8,
        prompt_format: str | None = None,
    ) -> list[SoftTokenStep]:
        """Per GIRCSE step, the ``top`` most probable vocabulary tokens of the soft token ``p_k``."""
        options = EncodeOptions.build(method="gircse", steps=steps, prompt_format=prompt_format, tau=self.tau)
        return inspect_soft_tokens(self.backbone, text, options, instruction=instruction or "", top=top)

    def generate(
        self,
        messages_or_prompt: str | list[dict],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: str | list[str] | None = None,
        stream: bool = False,
        seed: int | None = None,
    ) -> str | Iterator[str]:
        """Chat with the same weights that embed: the backbone's chat template, causal attention.

        Args:
            messages_or_prompt: a user prompt, or a conversation ``[{"role": "user", "content": ...}, ...]``.
            max_new_tokens: the most tokens to generate.
            temperature: 0 (default) decodes greedily and deterministically.
            top_p: nucleus sampling threshold (with ``temperature > 0``).
            stop: strings that end the reply; it is cut before the first one.
            stream: return an iterator of text pieces instead of the whole reply.
            seed: seed for reproducible sampling.

        Returns:
            The reply, or (``stream=True``) an iterator of pieces that join to it.

        Raises:
            TypeError / ValueError: malformed messages (the message names the index and field) or settings.
        """
        from .generation.chat import generate_pieces

        pieces = generate_pieces(
            self.backbone,
            messages_or_prompt,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=stop,
            seed=seed,
            use_adapter=self.generation_adapter,
        )
        return pieces if stream else "".join(pieces)

    def rerank(
        self,
        query: str,
        documents: list[str],
        *,
        top_n: int | None = None,
        instruction: str | None = None,
        batch_size: int = 8,
        max_length: int = 512,
        scoring: str = "query_likelihood",
    ) -> list[RerankResult]:
        """Order documents by relevance to the query, judged generatively by this model.

        Two scorings (:mod:`genembed.generation.rerank`). The default, ``"query_likelihood"`` (UPR): the
        mean log-probability of the query's tokens when the model is asked to write a query for the
        document. ``"yes_no"``: ``log P("Yes") - log P("No")`` at the answer to "Is the document
        relevant to the query?" (log-softmax over those two tokens). On scifact-dev with the bundled
        135M model, query likelihood lifted nDCG@10 of the top 10 from 22.3 to 31.3 while yes/no
        lowered it to 14.3 (docs/grit.md); yes/no needs a larger model.

        Args:
            query: the query.
            documents: candidate documents.
            top_n: return only the best ``top_n`` (default: all).
            instruction: task description opening the prompt, e.g. "Given a scientific claim, retrieve
                documents that support or refute the claim." (default: a generic relevance instruction).
            batch_size: documents per forward pass.
            max_length: document tokens kept.
            scoring: ``"query_likelihood"`` or ``"yes_no"`` (above).

        Returns:
            :class:`~genembed.generation.rerank.RerankResult` ``(index, score, document)`` items, best first.
        """
        from .generation.rerank import rerank

        return rerank(
            self.backbone,
            query,
            documents,
            top_n=top_n,
            instruction=instruction,
            batch_size=batch_size,
            max_length=max_length,
            scoring=scoring,
            use_adapter=self.generation_adapter,
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

    def similarity(self, a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> np.ndarray:
        """Cosine similarity matrix between two sets of embeddings."""
        a_t = torch.nn.functional.normalize(torch.as_tensor(np.atleast_2d(np.asarray(a)), dtype=torch.float32), dim=-1)
        b_t = torch.nn.functional.normalize(torch.as_tensor(np.atleast_2d(np.asarray(b)), dtype=torch.float32), dim=-1)
        return (a_t @ b_t.T).numpy()

    def __repr__(self) -> str:
        centred = ", center=True" if self.center else ""
        return f"GenerativeEmbedder({self.name!r}, dim={self.dim}, device={self.device}{centred})"
