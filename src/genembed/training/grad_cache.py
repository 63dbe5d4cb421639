"""Cached-gradient contrastive step (GradCache): a large batch's in-batch negatives in a small batch's memory.

1. Embed every query and document without gradients, chunk by chunk, recording each chunk's RNG state.
2. Compute the representation loss on those embeddings (as leaf tensors) and its gradient with respect
   to them: ``dL/dz``, ``(B, K, D)`` and ``(N, K, D)``.
3. Re-embed each chunk with gradients from the same RNG state (so LoRA dropout draws the same masks) and
   backpropagate ``sum(z * dL/dz)``, whose gradient with respect to the weights is the chunk's share of
   ``dL/dweights``.

Summed over chunks this is the gradient of the whole-batch loss; only one chunk's activations are alive
at a time. The price is a second forward pass without gradients (about a third more compute per text).
The generative loss, if any, is computed and backpropagated on its own batch as usual.

Reference: Gao, Zhang, Han, Callan, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup" (RepL4NLP 2021).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from ..encoders.batching import Batch
from ..encoders.shared_prefix import sharing_groups
from .data.generative import GenerativeBatch
from .objective import Objective

__all__ = ["grad_cache_single", "grad_cache_step", "length_sorted", "split_batch"]


def split_batch(batch: Batch, chunk: int) -> list[Batch]:
    """Row chunks of a left-padded batch, each trimmed of the padding columns none of its rows uses."""
    parts = []
    for start in range(0, batch.input_ids.shape[0], chunk):
        rows = slice(start, start + chunk)
        used = batch.attention_mask[rows].any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0  # left padding: every row ends at the last column
        parts.append(
            Batch(batch.input_ids[rows, first:], batch.attention_mask[rows, first:], batch.text_mask[rows, first:])
        )
    return parts


def length_sorted(batch: Batch, *aligned: torch.Tensor, by_prefix: bool = False) -> tuple[Batch, ...]:
    """The batch's rows (and each ``aligned`` tensor's rows) shortest first, so that :func:`split_batch`'s
    chunks hold texts of similar length and trim most of their padding. Only for losses that do not
    depend on the rows' order (a single-text batch's: its similarity KL and regression are sums over
    texts and text pairs).

    ``by_prefix``: the rows grouped by the prompt prefix before their text first (largest group first; rows
    with no group to share, last), shortest first within each group, so that a chunk embedded with shared
    prefixes (``embedding.share_prefix``) holds few prefixes: a batch under twenty instructions otherwise
    runs each chunk as many small passes."""
    lengths = batch.attention_mask.sum(dim=1)
    if by_prefix:
        shared, _ = sharing_groups(batch, share_single=False)  # the rows that run whole keep the last rank
        rank = torch.full_like(lengths, len(shared))
        for index, (rows, _) in enumerate(sorted(shared, key=lambda group: -len(group[0]))):
            rank[rows] = index
        lengths = rank * (batch.attention_mask.shape[1] + 1) + lengths
    order = lengths.argsort(stable=True)
    rows = Batch(batch.input_ids[order], batch.attention_mask[order], batch.text_mask[order])
    return rows, *(tensor[order.to(tensor.device)] for tensor in aligned)


def grad_cache_step(
    objective: Objective,
    queries: Batch,
    documents: Batch,
    labels: torch.Tensor,
    mask: torch.Tensor | None,
    generative: GenerativeBatch | None,
    *,
    chunk: int,
    scale: float = 1.0,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    **teacher: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """Backpropagate one micro-batch's loss (times ``scale``) with cached embedding gradients.

    Args:
        objective: the training objective (single process: documents are not gathered across processes).
        queries, documents: the micro-batch's tokenized texts.
        labels, mask: targets over the documents (see :class:`Objective`).
        generative: a generative batch for the joint loss, or None.
        chunk: texts embedded at once.
        scale: factor on the gradient (``1 / grad_accum``).
        autocast: a context factory for the forward passes (e.g. bf16 autocast).
        teacher: the teacher's inputs when the objective distills (see
            :meth:`Objective.representation_terms`); its terms are part of the cached-gradient loss.

    Returns:
        The same terms as :meth:`Objective.forward` (detached), without ``objective``.
    """
    q_parts, d_parts = split_batch(queries, chunk), split_batch(documents, chunk)

    def loss(z: list[torch.Tensor]) -> Any:
        q, d = torch.cat(z[: len(q_parts)]), torch.cat(z[len(q_parts) :])  # (B, K, D), (N, K, D)
        return objective.representation_terms(q, d, labels, mask, **teacher)

    terms = _cached_backward(objective, q_parts + d_parts, loss, scale, autocast)
    return _with_generative(objective, terms, generative, scale, autocast)


def grad_cache_single(
    objective: Objective,
    texts: Batch,
    teacher_texts: torch.Tensor,
    generative: GenerativeBatch | None = None,
    *,
    chunk: int,
    scale: float = 1.0,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    by_prefix: bool | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`grad_cache_step` for a single-text batch (:meth:`Objective.single_terms`): the KL over a
    few hundred texts' similarities needs every text's embedding at once, but only one chunk's activations.
    The texts are chunked shortest first (:func:`length_sorted`): chunks of similar lengths pad less; with
    shared prefixes, grouped by prefix first, so that each chunk runs few passes (``by_prefix``; None: when
    the objective shares prefixes). ``generative``: a generative batch riding along (``generative.every_step``),
    or None."""
    by_prefix = objective.share_prefix if by_prefix is None else by_prefix
    texts, teacher_texts = length_sorted(texts, teacher_texts, by_prefix=by_prefix)
    parts = split_batch(texts, chunk)
    terms = _cached_backward(
        objective, parts, lambda z: objective.single_terms(torch.cat(z), teacher_texts), scale, autocast
    )
    return _with_generative(objective, terms, generative, scale, autocast)


def _with_generative(
    objective: Objective,
    terms: Any,
    generative: GenerativeBatch | None,
    scale: float,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> dict[str, torch.Tensor]:
    """Backpropagate the generative loss of ``generative`` (if any) on its own, beside the representation
    ``terms`` already backpropagated; the step's logged terms."""
    with autocast():
        gen = objective.generative_loss(generative)
    if gen is not None:
        (objective.gen_weight * gen * scale).backward()
    else:
        gen = terms.total.new_zeros(())
    logged = {key: value.detach() for key, value in terms.logged().items()}
    return {"loss": (terms.total + objective.gen_weight * gen).detach(), **logged, "gen": gen.detach()}


def _cached_backward(
    objective: Objective,
    parts: list[Batch],
    loss: Callable[[list[torch.Tensor]], Any],
    scale: float,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> Any:
    """Embed ``parts`` without gradients, backpropagate ``loss(embeddings).total * scale`` into them (and
    into the loss's own parameters), then re-embed each part from the same RNG state and backpropagate
    its share into the model. Returns the loss's terms."""
    states, cached = [], []
    with torch.no_grad():
        for part in parts:
            states.append(_rng_state())
            with autocast():
                cached.append(objective.embed(part).float().requires_grad_())  # (n, K, D) leaves
    after = _rng_state()
    terms = loss(cached)
    (terms.total * scale).backward()
    for part, state, z_cached in zip(parts, states, cached, strict=True):
        if z_cached.grad is None:  # the loss does not depend on this part
            continue
        _set_rng_state(state)
        with autocast():
            z = objective.embed(part)
        (z.float() * z_cached.grad).sum().backward()
    _set_rng_state(after)
    return terms


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor] | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])
