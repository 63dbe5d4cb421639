from __future__ import annotations

import math

import pytest
import torch

from genembed.training.losses import InfoNCE, default_labels


def _reference(q, d, labels, temperature, mask=None):
    """Plain-Python InfoNCE: -log softmax of the positive's cosine/temperature over all documents."""
    total = 0.0
    for i, qi in enumerate(q.tolist()):
        scores = []
        for j, dj in enumerate(d.tolist()):
            if mask is not None and mask[i][j]:
                continue
            cos = sum(a * b for a, b in zip(qi, dj, strict=True)) / (
                math.dist(qi, [0] * len(qi)) * math.dist(dj, [0] * len(dj))
            )
            scores.append((j, cos / temperature))
        top = max(s for _, s in scores)
        log_z = top + math.log(sum(math.exp(s - top) for _, s in scores))
        total += log_z - dict(scores)[labels[i]]
    return total / len(q)


def test_matches_hand_computation_with_hard_negatives():
    torch.manual_seed(0)
    q, d = torch.randn(3, 5), torch.randn(6, 5)  # 3 queries, each 1 pos + 1 hard neg
    loss = InfoNCE(temperature=0.1)(q, d)
    assert loss.item() == pytest.approx(_reference(q, d, [0, 2, 4], 0.1), rel=1e-5)


def test_two_by_two_by_hand():
    # q0 = d0 (cos 1) and q0 orthogonal to d1 (cos 0): loss = log(1 + e^{-1/T})
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    t = 0.5
    expected = math.log(1 + math.exp(-1 / t))
    assert InfoNCE(t)(q, d).item() == pytest.approx(expected, rel=1e-6)


def test_temperature_is_used():
    torch.manual_seed(1)
    q, d = torch.randn(4, 8), torch.randn(4, 8)
    assert InfoNCE(0.02)(q, d).item() != pytest.approx(InfoNCE(0.05)(q, d).item(), rel=1e-3)
    assert InfoNCE().temperature == 0.02


def test_explicit_labels_and_mask_drop_false_negatives():
    torch.manual_seed(2)
    q, d = torch.randn(2, 4), torch.randn(5, 4)  # ragged: query 0 has 3 documents, query 1 has 2
    labels = torch.tensor([0, 3])
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 1] = True  # document 1 is a copy of query 1's other positive
    got = InfoNCE(0.1)(q, d, labels, mask).item()
    assert got == pytest.approx(_reference(q, d, [0, 3], 0.1, mask.tolist()), rel=1e-5)
    assert got < InfoNCE(0.1)(q, d, labels).item()  # one candidate fewer in the denominator


def test_masking_a_positive_is_an_error():
    mask = torch.eye(2, dtype=torch.bool)
    with pytest.raises(ValueError, match="own positive"):
        InfoNCE()(torch.randn(2, 3), torch.randn(2, 3), mask=mask)


def test_default_labels_need_equal_groups():
    assert default_labels(2, 6).tolist() == [0, 3]
    with pytest.raises(ValueError, match="equal groups"):
        default_labels(2, 5)
