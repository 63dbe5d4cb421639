"""Embedding precision: ``float32``, ``int8``, ``uint8``, ``binary``, ``ubinary``, with the semantics of
sentence-transformers' ``quantize_embeddings`` (tests/encoders/test_quantize.py checks equality).

- ``int8``/``uint8``: each dimension's ``[min, max]`` (from ``ranges``, else ``calibration_embeddings``,
  else the embeddings themselves) is cut into 255 steps; a value becomes its step index, as uint8, or
  shifted by -128 as int8.
- ``binary``/``ubinary``: one bit per dimension (``value > 0``), packed 8 to a byte (so ``dim / 8``
  bytes); ``binary`` stores each byte shifted by -128 as int8, ``ubinary`` as uint8.

Ranges computed from the embeddings being quantized depend on the batch. For vectors stored and
compared later, compute ``ranges`` once from a representative set and pass them every time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PRECISIONS", "check_precision", "quantize_embeddings", "quantization_ranges"]

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`; ValueError otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def quantization_ranges(embeddings: Any) -> np.ndarray:
    """``(2, dim)``: per-dimension minimum and maximum of ``(n, dim)`` embeddings, for int8/uint8."""
    embeddings = _as_float_array(embeddings)
    if embeddings.ndim != 2 or embeddings.shape[0] < 2:
        raise ValueError(
            f"int8/uint8 ranges need at least two embeddings of shape (n, dim), got shape {embeddings.shape}; "
            "pass ranges or calibration_embeddings"
        )
    return np.vstack((embeddings.min(axis=0), embeddings.max(axis=0)))


def quantize_embeddings(
    embeddings: Any,
    precision: str,
    *,
    ranges: np.ndarray | None = None,
    calibration_embeddings: Any | None = None,
) -> np.ndarray:
    """Quantize float embeddings ``(n, dim)`` (numpy or torch) to ``precision``.

    Args:
        embeddings: float embeddings, one row each.
        precision: one of :data:`PRECISIONS`.
        ranges: int8/uint8 only: ``(2, dim)`` per-dimension minimum and maximum.
        calibration_embeddings: int8/uint8 only: embeddings to take the ranges from when ``ranges`` is None.

    Returns:
        ``(n, dim)`` float32, int8 or uint8 values, or ``(n, ceil(dim / 8))`` packed bits.

    Raises:
        ValueError: an unknown precision, integer input, or int8/uint8 ranges that cannot be computed.
    """
    check_precision(precision)
    embeddings = _as_float_array(embeddings)
    if precision == "float32":
        return embeddings.astype(np.float32)
    if precision in ("binary", "ubinary"):
        packed = np.packbits(embeddings > 0, axis=-1)
        return (packed - 128).astype(np.int8) if precision == "binary" else packed
    if embeddings.ndim == 2 and embeddings.shape[0] == 0:
        return np.zeros(embeddings.shape, dtype=np.int8 if precision == "int8" else np.uint8)
    if ranges is None:
        ranges = quantization_ranges(embeddings if calibration_embeddings is None else calibration_embeddings)
    ranges = np.asarray(ranges, dtype=np.float32)
    starts = ranges[0]
    steps = (ranges[1] - starts) / 255
    steps = np.where(steps == 0, 1, steps)
    levels = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
    return (levels - 128).astype(np.int8) if precision == "int8" else levels.astype(np.uint8)


def _as_float_array(embeddings: Any) -> np.ndarray:
    if hasattr(embeddings, "detach"):  # a torch tensor
        embeddings = embeddings.detach().float().cpu().numpy()
    array = np.asarray(embeddings)
    if array.dtype in (np.int8, np.uint8):
        raise ValueError("embeddings to quantize must be float, not int8 or uint8")
    return array
