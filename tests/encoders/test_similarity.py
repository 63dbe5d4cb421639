from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.encoders.similarity import SIMILARITY_FUNCTIONS, similarity, similarity_pairwise

st_similarity = pytest.importorskip("sentence_transformers.util.similarity")


@pytest.fixture
def pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(4, 16)).astype(np.float32), rng.normal(size=(3, 16)).astype(np.float32)


@pytest.mark.parametrize("name", SIMILARITY_FUNCTIONS)
def test_matrix_matches_sentence_transformers(pair, name):
    a, b = pair
    theirs = st_similarity.SimilarityFunction.to_similarity_fn(name)(a, b)
    ours = similarity(a, b, name)
    assert isinstance(ours, torch.Tensor) and ours.shape == (4, 3)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(similarity(torch.from_numpy(a), b, name), ours)  # tensors or arrays


@pytest.mark.parametrize("name", SIMILARITY_FUNCTIONS)
def test_pairwise_matches_sentence_transformers(pair, name):
    a, b = pair[0][:3], pair[1]
    theirs = st_similarity.SimilarityFunction.to_similarity_pairwise_fn(name)(a, b)
    torch.testing.assert_close(similarity_pairwise(a, b, name), theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        similarity_pairwise(a, b, name), torch.diagonal(similarity(a, b, name)), atol=1e-5, rtol=0
    )


def test_distances_are_negative_and_one_vector_is_one_row():
    a = np.array([0.0, 0.0], dtype=np.float32)
    b = np.array([[3.0, 4.0]], dtype=np.float32)
    assert similarity(a, b, "euclidean").item() == pytest.approx(-5.0)
    assert similarity(a, b, "manhattan").item() == pytest.approx(-7.0)
    assert similarity(b, b, "dot").item() == pytest.approx(25.0)


def test_errors():
    with pytest.raises(ValueError, match="similarity_fn_name must be one of"):
        similarity(np.ones((1, 2)), np.ones((1, 2)), "jaccard")
    with pytest.raises(ValueError, match="same shape"):
        similarity_pairwise(np.ones((2, 2)), np.ones((3, 2)))
