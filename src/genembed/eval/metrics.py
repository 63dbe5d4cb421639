"""The task metrics, exactly as ``shared/data/README.md`` defines them; every score is x100.

Inputs are L2-normalised embeddings (so cosine = dot product). scipy and scikit-learn are imported
inside the functions (the ``eval`` extra).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "average_precision",
    "classification_accuracy",
    "cluster_v_measure",
    "l2_normalize",
    "ndcg_at_k",
    "pairwise_cosine",
    "spearman",
]


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm along the last axis (float32); zero vectors stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, np.finfo(np.float32).tiny)


def pairwise_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of row i of ``a`` with row i of ``b``, ``(n,)``, in float64."""
    a64, b64 = l2_normalize(a).astype(np.float64), l2_normalize(b).astype(np.float64)
    return (a64 * b64).sum(axis=-1)


def spearman(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """Spearman rank correlation x100 (ties get average ranks), e.g. of cosine vs gold score."""
    from scipy.stats import spearmanr

    return float(spearmanr(predicted, gold).statistic) * 100.0


def average_precision(scores: Sequence[float], labels: Sequence[float]) -> float:
    """Average precision x100 of ``scores`` ranking the pairs with label 1 first."""
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(np.asarray(labels, dtype=int), np.asarray(scores))) * 100.0


def ndcg_at_k(ranking: Sequence[str], judged: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k x100 of one query with linear gain.

    ``DCG = sum_{i<k} gain(ranking[i]) / log2(i + 2)``; unjudged documents have gain 0. The ideal
    DCG takes the ``k`` largest positive gains among *all* judgements of the query (also those of
    documents the ranking could not contain). A query without a positive gain scores NaN.
    """
    dcg = sum(judged.get(doc, 0.0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg * 100.0 if idcg > 0 else float("nan")


def classification_accuracy(
    train_x: np.ndarray, train_y: Sequence[str], test_x: np.ndarray, test_y: Sequence[str]
) -> float:
    """Accuracy x100 of ``LogisticRegression(max_iter=100)`` fit on the training embeddings."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    classifier = LogisticRegression(max_iter=100)
    with warnings.catch_warnings():  # the metric fixes max_iter=100; not converging is part of it
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", message="The number of unique classes", category=UserWarning)
        classifier.fit(train_x, list(train_y))
    predicted = classifier.predict(test_x)
    return float(np.mean(predicted == np.asarray(list(test_y), dtype=object))) * 100.0


def cluster_v_measure(x: np.ndarray, labels: Sequence[str], *, seed: int = 42, starts: int = 1) -> float:
    """V-measure x100 of ``MiniBatchKMeans(n_clusters=#labels, batch_size=500, n_init=1,
    random_state=seed)`` clusters against the gold labels; with ``starts`` > 1, the mean over the
    seeds ``seed .. seed + starts - 1`` (each start scored on its own, not the best of them).

    Evaluations use seed 42 and one start by default, as the reference implementation does; one start
    moves a score by 1-2 points (``experiments/clustering_seed_spread.py``), so comparing two close
    models wants the mean over many starts (``genembed eval --cluster-starts 20``)."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics import v_measure_score

    if starts < 1:
        raise ValueError(f"starts must be at least 1, got {starts}")
    n_clusters = len(set(labels))
    scores = []
    for s in range(seed, seed + starts):
        predicted = MiniBatchKMeans(n_clusters=n_clusters, batch_size=500, n_init=1, random_state=s).fit(x).labels_
        scores.append(float(v_measure_score(list(labels), predicted)) * 100.0)
    return float(np.mean(scores))
