from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.encoders.quantize import PRECISIONS, quantize_embeddings

st_quantization = pytest.importorskip("sentence_transformers.util.quantization")


@pytest.fixture
def embeddings() -> np.ndarray:
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(7, 21)).astype(np.float32)  # 21 dims: the last packed byte is partial
    rows[:, 3] = 0.25  # a constant dimension: a zero range must not divide by zero
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_matches_sentence_transformers(embeddings, precision):
    ours = quantize_embeddings(embeddings, precision)
    theirs = st_quantization.quantize_embeddings(embeddings, precision=precision)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_ranges_and_calibration_match_sentence_transformers(embeddings, precision):
    calibration = np.random.default_rng(1).normal(size=(50, 21)).astype(np.float32)
    ranges = np.vstack([calibration.min(0), calibration.max(0)])
    for kwargs in ({"ranges": ranges}, {"calibration_embeddings": calibration}):
        np.testing.assert_array_equal(
            quantize_embeddings(embeddings, precision, **kwargs),
            st_quantization.quantize_embeddings(embeddings, precision=precision, **kwargs),
        )


def test_binary_packs_signs_and_accepts_tensors():
    rows = torch.tensor([[1.0, -1.0, 0.5, 0.0, -0.1, 2.0, 3.0, -4.0, 0.2]])
    packed = quantize_embeddings(rows, "ubinary")
    assert packed.dtype == np.uint8 and packed.shape == (1, 2)
    assert list(np.unpackbits(packed[0])[:9]) == [1, 0, 1, 0, 0, 1, 1, 0, 1]
    np.testing.assert_array_equal(quantize_embeddings(rows, "binary"), (packed.astype(np.int16) - 128).astype(np.int8))


def test_errors():
    with pytest.raises(ValueError, match="precision must be one of"):
        quantize_embeddings(np.zeros((2, 4)), "int4")
    with pytest.raises(ValueError, match="at least two embeddings"):
        quantize_embeddings(np.ones((1, 4)), "int8")
    with pytest.raises(ValueError, match="must be float"):
        quantize_embeddings(np.ones((2, 4), dtype=np.int8), "binary")
