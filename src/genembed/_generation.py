"""Generation, the collaborator :class:`genembed.GenerativeEmbedder` chats and reranks through: ``generate``
and ``rerank`` (:mod:`genembed.generation`), on the weights the model's ``generation_adapter`` names
(:mod:`genembed.generation.weights`). It holds no model: each method takes the model it generates for."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from .encoders.model_settings import ModelSettings

if TYPE_CHECKING:
    from .generation.rerank import RerankOptions, RerankResult
    from .generation.sampling import SamplingKwargs, SamplingOptions
    from .generation.weights import GenerationWeights

__all__ = ["GeneratingModel", "Generation"]


class GeneratingModel(Protocol):
    """What :class:`Generation` reads of a model (:class:`genembed.GenerativeEmbedder` is one)."""

    backbone: Any
    settings: ModelSettings
    adapter: str | None
    generation_adapter: GenerationWeights


class Generation:
    """``generate`` and ``rerank`` (see :class:`genembed.GenerativeEmbedder`), for the model each call names."""

    def generate(
        self,
        model: GeneratingModel,
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

        note = base_weights_note(model)
        if note is not None:
            warnings.warn(note.removeprefix("note: "), BaseWeightsWarning, stacklevel=3)

        pieces = generate_pieces(
            model.backbone,
            messages_or_prompt,
            sampling=sampling,
            use_adapter=model.generation_adapter,
            prompt_format=model.settings.prompt_format,
            **options,
        )
        return pieces if stream else "".join(pieces)

    def rerank(
        self, model: GeneratingModel, query: str, documents: list[str], **options: Unpack[RerankOptions]
    ) -> list[RerankResult]:
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
            model.backbone,
            query,
            documents,
            use_adapter=model.generation_adapter,
            prompt_format=model.settings.prompt_format,
            **options,
        )
