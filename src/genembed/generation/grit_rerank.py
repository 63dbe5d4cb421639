"""Pointwise reranking with the GRIT authors' prompt, for models that use GritLM's format.

GritLM's reranking code (``scripts/AbsTaskRetrieval.py`` of github.com/ContextualAI/gritlm) asks, for each
(query, passage) pair, in GritLM's chat format with BOS::

    <|user|>
    Given a query and a passage, judge whether the passage is relevant to the query or not.

    Query: {query}
    Passage: {passage}

    Answer with yes if the passage is relevant to the query, and no otherwise.
    <|assistant|>
    Answer:

tokenizes that whole string as it is, runs it causally and reads the next token's logits. The authors
order by the raw logit of " yes"; genembed scores ``log P(" yes") - log P(" no")`` with the softmax over
those two tokens, as its own ``yes_no`` scoring does, so that the score has a meaning of its own (the
log-odds of relevance) and the probability ``sigmoid(score)`` is comparable across queries. ``instruction``
replaces the first line (the authors use another one for ArguAna).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from ..backbone.attention import run_decoder
from ..encoders.defaults import DEFAULT_MAX_LENGTH
from ._scoring import check_sizes, right_padded_batches, yes_no_log_odds
from .decoding import lm_head

__all__ = ["GRIT_RERANK_INSTRUCTION", "grit_answer_ids", "grit_rerank_prompt", "score_grit_pairs"]

GRIT_RERANK_INSTRUCTION = "Given a query and a passage, judge whether the passage is relevant to the query or not."
_TEMPLATE = (
    "<|user|>\n{instruction}\n\nQuery: {query}\nPassage: {passage}\n\n"
    "Answer with yes if the passage is relevant to the query, and no otherwise.\n<|assistant|>\nAnswer:"
)
_ANSWERS = (" yes", " no")  # what follows "Answer:" (Mistral's ids 5081 and 708 in GritLM's code)


def grit_rerank_prompt(query: str, passage: str, instruction: str = GRIT_RERANK_INSTRUCTION) -> str:
    """The prompt of one pair (tokenize it with special tokens, as GritLM does)."""
    return _TEMPLATE.format(instruction=instruction, query=query, passage=passage)


@functools.lru_cache(maxsize=16)
def grit_answer_ids(tokenizer: Any) -> tuple[tuple[int, ...], int, int]:
    """``(shared, yes, no)``: the tokens " yes" and " no" share at their start (none for Mistral's
    vocabulary, where each is one token) and the first token where they differ. The shared tokens go
    into the prompt: they are common to both answers, so they cancel in the log-odds.

    Raises:
        ValueError: one answer's tokens are a prefix of the other's.
    """
    yes, no = (tokenizer(word, add_special_tokens=False)["input_ids"] for word in _ANSWERS)
    n = 0
    while n < min(len(yes), len(no)) and yes[n] == no[n]:
        n += 1
    if n == min(len(yes), len(no)):
        raise ValueError(f"this tokenizer cannot tell the answers {_ANSWERS} apart")
    return tuple(yes[:n]), yes[n], no[n]


@torch.no_grad()
def score_grit_pairs(
    model: Any,
    tokenizer: Any,
    query: str,
    documents: Sequence[str],
    *,
    instruction: str = GRIT_RERANK_INSTRUCTION,
    batch_size: int = 8,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> torch.Tensor:
    """``log P(" yes") - log P(" no")`` after GRIT's prompt for each document (float32, input order).

    Arguments as in :func:`genembed.generation.rerank.score_pairs`; a document longer than ``max_length``
    tokens is cut to its first ``max_length`` tokens before it goes into the prompt.
    """
    check_sizes(batch_size, max_length)
    if not documents:
        return torch.zeros(0)
    shared, yes, no = grit_answer_ids(tokenizer)
    doc_ids = tokenizer(list(documents), add_special_tokens=False)["input_ids"]
    passages = [
        doc if len(ids) <= max_length else tokenizer.decode(ids[:max_length])
        for doc, ids in zip(documents, doc_ids, strict=True)
    ]
    rows = [
        [*ids, *shared] for ids in tokenizer([grit_rerank_prompt(query, p, instruction) for p in passages])["input_ids"]
    ]
    device = next(model.parameters()).device
    head, scores = lm_head(model), torch.zeros(len(rows))
    for indices, ids, mask in right_padded_batches(rows, batch_size, tokenizer.pad_token_id):
        hidden = run_decoder(model, input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        scores[indices] = yes_no_log_odds(head, hidden, [len(rows[i]) for i in indices], yes, no)
    return scores
