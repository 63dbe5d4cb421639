"""Reranking by query likelihood: how probable the model finds the query after reading the document.

Each document is put in a chat turn that asks for a query it is relevant to, and the score is the
mean log-probability of the actual query's tokens as the assistant's reply::

    user:      Passage: {document}

               Task: {instruction}
               Write a query for this task that the passage is relevant to.
    assistant: {query}

This is UPR (Sachan et al., 2022, *Improving Passage Retrieval with Zero-Shot Question Generation*).
A small model that cannot judge relevance when asked yes/no can still tell which passage makes the
query predictable (see ``docs/grit.md`` for the measurement). Every pair needs its own pass (the
document comes first), but only the query positions go through the LM head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..backbone.attention import run_decoder
from ..encoders.defaults import DEFAULT_MAX_LENGTH
from ..encoders.prompts import SENTINEL, split_around, split_ids
from ._scoring import check_sizes, right_padded_batches
from .decoding import lm_head

__all__ = ["MAX_QUERY_TOKENS", "query_likelihood_prompt", "score_query_likelihood"]

MAX_QUERY_TOKENS = 256  # query tokens scored (and kept in yes/no prompts); longer queries are cut

_REQUEST = "Write a query for this task that the passage is relevant to."


def query_likelihood_prompt(
    tokenizer: Any, instruction: str, prompt_format: str | None = None
) -> tuple[list[int], list[int]]:
    """Token ids before and after the document; the query's tokens follow the second part.
    ``prompt_format="gritlm"``: in GritLM's chat turn, with its BOS."""
    content = f"Passage: {SENTINEL}\n\nTask: {instruction}\n{_REQUEST}"
    grit = prompt_format == "gritlm"
    parts = split_around(tokenizer, content, plain_end="\nQuery: ", prompt_format=prompt_format)
    return split_ids(tokenizer, *parts, special=grit)


@torch.no_grad()
def score_query_likelihood(
    model: Any,
    tokenizer: Any,
    query: str,
    documents: Sequence[str],
    *,
    instruction: str,
    batch_size: int = 8,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_query_tokens: int = MAX_QUERY_TOKENS,
    prompt_format: str | None = None,
) -> torch.Tensor:
    """Mean log-probability of the query's tokens given each document (float32, input order).

    ``model`` (a causal LM or peft wrapper), its ``tokenizer``, the ``query``, the candidate
    ``documents``, ``batch_size`` and ``max_length`` are as in :func:`genembed.generation.rerank.score_pairs`.

    Args:
        instruction: the retrieval task's description (what kind of query to write).
        max_query_tokens: query tokens scored.
        prompt_format: ``"gritlm"`` asks in GritLM's chat format (:func:`query_likelihood_prompt`).
    """
    check_sizes(batch_size, max_length)
    query_ids = tokenizer(query, add_special_tokens=False)["input_ids"][:max_query_tokens]
    if not documents:
        return torch.zeros(0)
    if not query_ids:
        raise ValueError("query likelihood needs a non-empty query")
    before, after = query_likelihood_prompt(tokenizer, instruction, prompt_format)
    doc_ids = tokenizer(list(documents), add_special_tokens=False)["input_ids"]
    rows = [before + ids[:max_length] + after + query_ids for ids in doc_ids]
    n_query = len(query_ids)
    device = next(model.parameters()).device
    targets = torch.tensor(query_ids, device=device)
    head, scores = lm_head(model), torch.zeros(len(rows))
    for indices, ids, mask in right_padded_batches(rows, batch_size, tokenizer.pad_token_id):
        hidden = run_decoder(model, input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        # the states that predict the query tokens: positions len - n_query - 1 .. len - 2 of each row
        ends = torch.tensor([len(rows[i]) - 1 for i in indices], device=device)
        positions = ends[:, None] - n_query + torch.arange(n_query, device=device)[None]  # (b, n_query)
        rows_idx = torch.arange(len(indices), device=device)[:, None]
        log_probs = torch.log_softmax(head(hidden[rows_idx, positions]).float(), dim=-1)  # (b, n_query, V)
        token_lp = log_probs.gather(-1, targets.expand(len(indices), -1).unsqueeze(-1)).squeeze(-1)
        scores[indices] = token_lp.mean(dim=-1).cpu()
    return scores
