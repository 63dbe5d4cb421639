"""The metrics against hand computations and independent scipy/sklearn computations on toy data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genembed.eval.metrics import (
    average_precision,
    classification_accuracy,
    cluster_v_measure,
    l2_normalize,
    ndcg_at_k,
    pairwise_cosine,
    spearman,
)


def _ranks(x):
    """Average ranks (1-based) with ties, by hand."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def test_spearman_matches_a_hand_rank_correlation_with_ties():
    predicted = [0.9, 0.1, 0.5, 0.5, 0.3, 0.8]
    gold = [5.0, 0.0, 2.0, 3.0, 2.0, 4.0]
    rp, rg = _ranks(predicted), _ranks(gold)
    expected = np.corrcoef(rp, rg)[0, 1] * 100
    assert spearman(predicted, gold) == pytest.approx(expected, abs=1e-9)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-100.0)


def test_ndcg_with_graded_relevance_by_hand():
    judged = {"d1": 3, "d2": 2, "d3": 1, "d4": 2}  # d4 is never retrieved: it still counts in the ideal DCG
    ranking = ["d3", "d1", "x9", "d2"]
    dcg = 1 / math.log2(2) + 3 / math.log2(3) + 0 + 2 / math.log2(5)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 2 / math.log2(4) + 1 / math.log2(5)
    assert ndcg_at_k(ranking, judged, 10) == pytest.approx(100 * dcg / idcg)
    # only the first k ranks count, and the ideal DCG is cut at k too
    assert ndcg_at_k(ranking, judged, 2) == pytest.approx(100 * (1 + 3 / math.log2(3)) / (3 + 2 / math.log2(3)))
    assert ndcg_at_k(["d1", "d2", "d4", "d3"], judged, 10) == pytest.approx(100.0)
    assert math.isnan(ndcg_at_k(["d1"], {"d1": 0}, 10))


def test_ndcg_agrees_with_sklearn_on_full_rankings():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        n = 30
        gains = rng.integers(0, 4, size=n).astype(float)
        gains[rng.integers(0, n)] = 3.0  # at least one relevant document
        scores = rng.permutation(n).astype(float)  # no ties
        ranking = [f"d{i}" for i in np.argsort(-scores)]
        judged = {f"d{i}": g for i, g in enumerate(gains) if g > 0}
        expected = ndcg_score(gains[None], scores[None], k=10) * 100
        assert ndcg_at_k(ranking, judged, 10) == pytest.approx(expected, abs=1e-9)


def test_average_precision_by_hand():
    # ranked by score: 1, 0, 1, 0 -> precision at the hits: 1/1 and 2/3
    assert average_precision([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0]) == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert average_precision([0.1, 0.2, 0.3], [1, 1, 0]) == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)


def test_classification_accuracy_is_logistic_regression_max_iter_100():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x_train, x_test = l2_normalize(rng.normal(size=(60, 8))), l2_normalize(rng.normal(size=(40, 8)))
    y_train = [str(i % 3) for i in range(60)]
    y_test = [str(i % 3) for i in range(40)]
    expected = np.mean(LogisticRegression(max_iter=100).fit(x_train, y_train).predict(x_test) == np.array(y_test))
    assert classification_accuracy(x_train, y_train, x_test, y_test) == pytest.approx(100 * expected)
    centers = np.eye(8)[:3] * 5
    separable = l2_normalize(np.concatenate([centers + 0.01 * rng.normal(size=(3, 8)) for _ in range(4)]))
    labels = ["a", "b", "c"] * 4
    assert classification_accuracy(separable, labels, separable, labels) == 100.0


def test_cluster_v_measure_settings_and_perfect_clusters():
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics import v_measure_score

    rng = np.random.default_rng(2)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    labels = [str(i % 4) for i in range(50)]
    predicted = MiniBatchKMeans(n_clusters=4, batch_size=500, n_init=1, random_state=42).fit(x).labels_
    assert cluster_v_measure(x, labels) == pytest.approx(100 * v_measure_score(labels, predicted))
    other = MiniBatchKMeans(n_clusters=4, batch_size=500, n_init=1, random_state=7).fit(x).labels_
    assert cluster_v_measure(x, labels, seed=7) == pytest.approx(100 * v_measure_score(labels, other))
    assert cluster_v_measure(x, labels, seed=7) != cluster_v_measure(x, labels)  # noise: the seed matters here
    blobs = np.concatenate([np.eye(6)[i] * 10 + 0.01 * rng.normal(size=(5, 6)) for i in range(3)])
    assert cluster_v_measure(blobs, [c for c in "xyz" for _ in range(5)]) == pytest.approx(100.0)


def test_cluster_v_measure_starts_average_consecutive_seeds():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    labels = [str(i % 3) for i in range(60)]
    one = [cluster_v_measure(x, labels, seed=s) for s in (42, 43, 44, 45)]
    assert len(set(one)) > 1  # the starts differ, so the mean is not any one of them
    assert cluster_v_measure(x, labels, starts=4) == pytest.approx(np.mean(one))
    assert cluster_v_measure(x, labels, starts=1) == one[0]
    assert cluster_v_measure(x, labels, seed=43, starts=2) == pytest.approx(np.mean(one[1:3]))
    with pytest.raises(ValueError, match="starts must be at least 1, got 0"):
        cluster_v_measure(x, labels, starts=0)


def test_normalize_and_pairwise_cosine():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    assert np.allclose(l2_normalize(x), [[0.6, 0.8], [0.0, 0.0]])
    assert pairwise_cosine(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[2.0, 0.0], [-1.0, -1.0]])) == pytest.approx(
        [1.0, -1.0]
    )
