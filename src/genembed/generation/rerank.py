"""Pointwise reranking by generative scoring: ask the model whether a document is relevant.

Each (query, document) pair is rendered with the chat template as one user turn::

    {instruction}

    Query: {query}

    Document: {document}

    Is the document relevant to the query? Answer Yes or No.

and scored at the assistant's first token as ``log P("Yes") - log P("No")``, with the softmax
restricted to those two answer tokens (so the score is the model's log-odds of "Yes" and does not
depend on how much probability other tokens take). Everything before the document (template,
instruction, query) is run once per query; its KV cache is shared by every batch of documents,
which are right-padded behind it.

Each :class:`RerankResult` also carries ``probability``, a number in [0, 1] that means what the
scoring can honestly say (:func:`relevance_probabilities`):

- ``yes_no``: ``P("Yes") / (P("Yes") + P("No"))``, the sigmoid of the log-odds; judged for each
  document on its own, so it does not depend on the other candidates.
- ``query_likelihood``: the posterior probability that the query was written for this document
  rather than another candidate, ``P(q | d_i) / sum_j P(q | d_j)`` (a uniform prior over the
  candidates, ``P(q | d)`` the model's probability of the whole query). The candidates' probabilities
  sum to 1: it compares documents within one request and is 1 for a lone document.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from ..backbone.attention import run_decoder
from ..encoders.defaults import DEFAULT_MAX_LENGTH
from ..encoders.instructions import DEFAULT_QUERY_INSTRUCTION, DEFAULT_RERANK_INSTRUCTION
from ..encoders.prompts import SENTINEL, split_around, split_ids
from ._scoring import check_sizes, right_padded_batches, yes_no_log_odds
from .adapters import adapter_mode
from .decoding import lm_head
from .grit_rerank import GRIT_RERANK_INSTRUCTION, score_grit_pairs
from .query_likelihood import MAX_QUERY_TOKENS, score_query_likelihood

__all__ = [
    "ANSWER_TOKENS",
    "DEFAULT_RERANK_INSTRUCTION",
    "SCORINGS",
    "RerankOptions",
    "RerankPrompt",
    "RerankResult",
    "answer_token_ids",
    "rerank",
    "relevance_probabilities",
    "rerank_prompt",
    "score_pairs",
]

SCORINGS = ("yes_no", "query_likelihood")
ANSWER_TOKENS = ("Yes", "No")  # the casing SmolLM2-Instruct answers with
_QUESTION = "Is the document relevant to the query? Answer Yes or No."


@dataclass(frozen=True)
class RerankResult:
    """One reranked document.

    Attributes:
        index: its position in the input list.
        score: the raw score that orders the documents: the mean log-probability of the query's
            tokens (``query_likelihood``) or ``log P("Yes") - log P("No")`` (``yes_no``).
        document: its text.
        probability: the score as a probability in [0, 1] (module docstring and
            :func:`relevance_probabilities`); :func:`rerank` always sets it.
    """

    index: int
    score: float
    document: str
    probability: float | None = None


class RerankOptions(TypedDict, total=False):
    """The keyword options of :func:`rerank` that :meth:`genembed.GenerativeEmbedder.rerank` passes on."""

    top_n: int | None  # return only the best top_n (None: all)
    instruction: str | None  # the task description opening the prompt (None: the scoring's default)
    batch_size: int  # documents per forward pass
    max_length: int  # document tokens kept
    scoring: str  # "query_likelihood" or "yes_no"


@dataclass(frozen=True)
class RerankPrompt:
    """Token ids of a rerank prompt's parts: ``prefix + document + suffix``."""

    prefix: list[int]
    suffix: list[int]


def rerank_prompt(
    tokenizer: Any, query: str, instruction: str, max_query_tokens: int = MAX_QUERY_TOKENS
) -> RerankPrompt:
    """Tokenize the prompt around the document (the query is cut to ``max_query_tokens``)."""
    query_ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    if len(query_ids) > max_query_tokens:
        query = tokenizer.decode(query_ids[:max_query_tokens])
    content = f"{instruction}\n\nQuery: {query}\n\nDocument: {SENTINEL}\n\n{_QUESTION}"
    return RerankPrompt(*split_ids(tokenizer, *split_around(tokenizer, content, plain_end="\nAnswer:")))


@functools.lru_cache(maxsize=16)
def answer_token_ids(tokenizer: Any) -> tuple[int, int]:
    """Ids of the "Yes" and "No" answer tokens.

    Real tokenizers have one token for each; when a word takes several tokens (tiny test vocabularies)
    its first token stands for it, and the two first tokens must differ.
    """
    yes, no = (tokenizer(word, add_special_tokens=False)["input_ids"][:1] for word in ANSWER_TOKENS)
    if not yes or not no or yes == no:
        raise ValueError(f"this tokenizer cannot tell the answers {ANSWER_TOKENS} apart by their first token")
    return yes[0], no[0]


@torch.no_grad()
def score_pairs(
    model: Any,
    tokenizer: Any,
    query: str,
    documents: Sequence[str],
    *,
    instruction: str = DEFAULT_RERANK_INSTRUCTION,
    batch_size: int = 8,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> torch.Tensor:
    """``log P("Yes") - log P("No")`` for each document (float32, input order).

    Args:
        model: a causal LM (or peft wrapper).
        tokenizer: its tokenizer.
        query: the query.
        documents: the candidate documents.
        instruction: the task description opening the prompt.
        batch_size: documents per forward pass.
        max_length: document tokens kept (longer documents are cut from the end).
    """
    check_sizes(batch_size, max_length)
    if not documents:
        return torch.zeros(0)
    yes, no = answer_token_ids(tokenizer)
    prompt = rerank_prompt(tokenizer, query, instruction)
    device = next(model.parameters()).device
    n_prefix = len(prompt.prefix)
    prefix = run_decoder(
        model,
        input_ids=torch.tensor([prompt.prefix], device=device),
        attention_mask=torch.ones((1, n_prefix), dtype=torch.long, device=device),
        use_cache=True,
    ).cache
    rows = [
        ids[:max_length] + prompt.suffix for ids in tokenizer(list(documents), add_special_tokens=False)["input_ids"]
    ]
    head, scores = lm_head(model), torch.zeros(len(rows))
    for indices, ids, mask in right_padded_batches(rows, batch_size, tokenizer.pad_token_id, prefix=n_prefix):
        width = ids.shape[1]
        hidden = run_decoder(
            model,
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=torch.arange(n_prefix, n_prefix + width, device=device).expand(len(indices), -1),
            cache=_repeat_cache(prefix, len(indices), model),
        ).last_hidden_state
        scores[indices] = yes_no_log_odds(head, hidden, [len(rows[i]) for i in indices], yes, no)
    return scores


def relevance_probabilities(scores: torch.Tensor, scoring: str, query_tokens: int) -> torch.Tensor:
    """Rerank scores as probabilities in [0, 1] (float32, same order).

    Args:
        scores: every candidate's score from :func:`score_pairs` (``yes_no``) or
            :func:`~genembed.generation.query_likelihood.score_query_likelihood` (``query_likelihood``).
        scoring: which of the two made them.
        query_tokens: query tokens the query-likelihood score averaged over (it turns the mean
            log-probability back into ``log P(query | document)``).

    Returns:
        ``yes_no``: ``sigmoid(score) = P("Yes") / (P("Yes") + P("No"))`` for each document.
        ``query_likelihood``: ``softmax_i(query_tokens * score_i)``, the posterior that the query was
        written for document i among these candidates (uniform prior); the values sum to 1.
    """
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    scores = torch.as_tensor(scores, dtype=torch.float64)
    if scoring == "yes_no":
        return torch.sigmoid(scores).float()
    if query_tokens < 1:
        raise ValueError(f"query_tokens must be >= 1, got {query_tokens}")
    return torch.softmax(scores * query_tokens, dim=0).float()


def _repeat_cache(cache: Any, batch: int, model: Any) -> Any:
    """A new cache holding ``batch`` copies of a batch-1 cache (views; the original is not changed)."""
    from transformers import DynamicCache

    layers = [(keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1)) for keys, values, *_ in cache]
    config = getattr(model, "config", None)
    return DynamicCache(layers, config=config) if config is not None else DynamicCache(layers)


def rerank(
    backbone: Any,
    query: str,
    documents: Sequence[str],
    *,
    top_n: int | None = None,
    instruction: str | None = None,
    batch_size: int = 8,
    max_length: int = DEFAULT_MAX_LENGTH,
    scoring: str = "query_likelihood",
    use_adapter: bool | str = True,
    prompt_format: str | None = None,
) -> list[RerankResult]:
    """Score documents against a query and return them best first (see :meth:`GenerativeEmbedder.rerank`).

    ``scoring`` is ``"yes_no"`` (this module) or ``"query_likelihood"``
    (:mod:`genembed.generation.query_likelihood`). Each result's ``probability`` is computed over all
    the documents, before ``top_n`` cuts the list (:func:`relevance_probabilities`). With
    ``prompt_format="gritlm"`` (a model that uses GritLM's format) ``yes_no`` asks with the GRIT authors'
    reranking prompt (:mod:`genembed.generation.grit_rerank`) and ``query_likelihood`` puts its request
    in GritLM's chat turn.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    if isinstance(documents, str):
        raise TypeError("documents must be a list of strings, got one string")
    documents = list(documents)
    for i, doc in enumerate(documents):
        if not isinstance(doc, str):
            raise TypeError(f"documents[{i}] must be a string, got {type(doc).__name__}")
    if top_n is not None and top_n < 1:
        raise ValueError(f"top_n must be >= 1 or None, got {top_n}")
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    grit = prompt_format == "gritlm"
    if scoring == "yes_no":
        score = score_grit_pairs if grit else score_pairs
        default_instruction = GRIT_RERANK_INSTRUCTION if grit else DEFAULT_RERANK_INSTRUCTION
    else:
        score = functools.partial(score_query_likelihood, prompt_format=prompt_format)
        default_instruction = DEFAULT_QUERY_INSTRUCTION
    with adapter_mode(backbone.model, use_adapter):
        scores = score(
            backbone.model,
            backbone.tokenizer,
            query,
            documents,
            instruction=instruction or default_instruction,
            batch_size=batch_size,
            max_length=max_length,
        )
    query_tokens = len(backbone.tokenizer(query, add_special_tokens=False)["input_ids"][:MAX_QUERY_TOKENS])
    probabilities = relevance_probabilities(scores, scoring, max(query_tokens, 1)) if documents else scores
    order = sorted(range(len(documents)), key=lambda i: (-float(scores[i]), i))
    return [RerankResult(i, float(scores[i]), documents[i], float(probabilities[i])) for i in order[:top_n]]
