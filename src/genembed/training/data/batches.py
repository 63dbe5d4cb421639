"""Turn sampled rows into a contrastive batch: queries, documents, labels and a false-negative mask.

Documents are laid out query by query, ``[pos_0, negs_0..., pos_1, negs_1..., ...]``; a query's
label is the index of its positive. Each row contributes one positive and up to ``hard_negatives``
negatives, chosen at random (a row with fewer negatives uses what it has). A document whose text
equals one of a query's positives, other than its labelled one, is masked out for that query: it is
not a negative. Between rows that both carry a class ``label``, another row's positive of the same
class and another row's hard negatives when its class differs are masked out too (see
:mod:`.contrastive`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .contrastive import ContrastiveRow

__all__ = ["ContrastiveBatch", "build_contrastive_batch"]


@dataclass
class ContrastiveBatch:
    """Texts and targets of one batch (all indices are into this batch's lists)."""

    queries: list[str]
    query_instructions: list[str]
    documents: list[str]
    document_instructions: list[str]
    labels: list[int]  # index of each query's positive document
    groups: list[tuple[int, int]]  # each query's [start, end) span of documents
    masked: list[tuple[int, int]]  # (query, document) pairs that are not negatives
    distilled: list[bool] | None = None  # per query, whether a teacher's similarities apply (None = all)

    def label_tensor(self) -> torch.Tensor:
        return torch.tensor(self.labels, dtype=torch.long)

    def mask_tensor(self) -> torch.Tensor | None:
        """Boolean ``(B, N)``, True where a document is not a candidate for a query; None if nothing is masked."""
        if not self.masked:
            return None
        mask = torch.zeros((len(self.queries), len(self.documents)), dtype=torch.bool)
        for q, d in self.masked:
            mask[q, d] = True
        return mask

    def distill_tensor(self) -> torch.Tensor:
        """Boolean ``(B,)``, True for the queries whose rows are distilled from a teacher."""
        if self.distilled is None:
            return torch.ones(len(self.queries), dtype=torch.bool)
        return torch.tensor(self.distilled, dtype=torch.bool)

    def document_distill_tensor(self) -> torch.Tensor:
        """Boolean ``(N,)``, True for the documents of the queries whose rows are distilled."""
        rows = self.distill_tensor()
        out = torch.zeros(len(self.documents), dtype=torch.bool)
        for (start, end), flag in zip(self.groups, rows.tolist(), strict=True):
            out[start:end] = flag
        return out

    def shard(self, rank: int, world: int) -> ContrastiveBatch:
        """This process's contiguous slice of the queries with their documents (indices made local).

        Concatenating the shards of ranks 0..world-1 gives back this batch's document order, which is
        what gathering documents across processes relies on.
        """
        if len(self.queries) % world:
            raise ValueError(f"{len(self.queries)} queries do not split evenly over {world} processes")
        per = len(self.queries) // world
        q0, q1 = rank * per, (rank + 1) * per
        d0, d1 = self.groups[q0][0], self.groups[q1 - 1][1]
        return ContrastiveBatch(
            queries=self.queries[q0:q1],
            query_instructions=self.query_instructions[q0:q1],
            documents=self.documents[d0:d1],
            document_instructions=self.document_instructions[d0:d1],
            labels=[label - d0 for label in self.labels[q0:q1]],
            groups=[(a - d0, b - d0) for a, b in self.groups[q0:q1]],
            masked=[(q - q0, d - d0) for q, d in self.masked if q0 <= q < q1 and d0 <= d < d1],
            distilled=None if self.distilled is None else self.distilled[q0:q1],
        )


def build_contrastive_batch(
    rows: Sequence[ContrastiveRow],
    *,
    hard_negatives: int,
    rng: np.random.Generator,
    doc_instruction: str = "",
    symmetric: Sequence[bool] | None = None,
    distill: Sequence[bool] | None = None,
) -> ContrastiveBatch:
    """Choose each row's positive and hard negatives and lay the batch out.

    Args:
        rows: the sampled rows.
        hard_negatives: at most this many negatives per query.
        rng: source of the random choices (seed it per batch for reproducible runs).
        doc_instruction: instruction on documents.
        symmetric: per row, documents get the row's own instruction instead of ``doc_instruction``.
        distill: per row, whether a teacher's similarities apply to it (None = every row).
    """
    queries, q_inst, docs, d_inst, labels, groups = [], [], [], [], [], []
    for i, row in enumerate(rows):
        pos = row.pos[int(rng.integers(len(row.pos)))]
        n_neg = min(hard_negatives, len(row.neg))
        negs = [row.neg[j] for j in rng.choice(len(row.neg), size=n_neg, replace=False)] if n_neg else []
        inst = row.instruction if symmetric is not None and symmetric[i] else doc_instruction
        queries.append(row.query)
        q_inst.append(row.instruction)
        labels.append(len(docs))
        docs += [pos, *negs]
        d_inst += [inst] * (1 + len(negs))
        groups.append((labels[-1], len(docs)))
    masked = []
    for qi, row in enumerate(rows):
        positives = set(row.pos)
        skip = {d for d, text in enumerate(docs) if d != labels[qi] and text in positives}
        for qj, other in enumerate(rows):
            if qj == qi or row.label is None or other.label is None:
                continue
            # the other row's positive (its group's first document) is of its class, its negatives are not
            start, end = groups[qj]
            same_class = other.label == row.label
            skip.update(d for d in range(start, end) if (d == start) == same_class)
        masked += [(qi, d) for d in sorted(skip)]
    distilled = None if distill is None else [bool(flag) for flag in distill]
    return ContrastiveBatch(queries, q_inst, docs, d_inst, labels, groups, masked, distilled)
