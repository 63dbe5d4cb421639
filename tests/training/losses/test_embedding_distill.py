from __future__ import annotations

import math

import pytest
import torch

from genembed.training.losses import EmbeddingDistillation


def _reference(student, teacher, weight, kind, rows=None):
    """Plain Python: map the normalised student vector by W, compare it with the normalised teacher vector."""

    def unit(v):
        n = math.sqrt(sum(x * x for x in v))
        return [x / n for x in v]

    losses = []
    for i, (s, t) in enumerate(zip(student.tolist(), teacher.tolist(), strict=True)):
        if rows is not None and not rows[i]:
            continue
        s, t = unit(s), unit(t)
        m = [sum(w * x for w, x in zip(row, s, strict=True)) for row in weight.tolist()]
        if kind == "cosine":
            losses.append(1 - sum(a * b for a, b in zip(unit(m), t, strict=True)))
        else:
            losses.append(sum((a - b) ** 2 for a, b in zip(m, t, strict=True)))
    return sum(losses) / len(losses) if losses else 0.0


@pytest.mark.parametrize("kind", ["cosine", "mse"])
def test_matches_the_reference(kind):
    torch.manual_seed(0)
    loss = EmbeddingDistillation(5, 3, kind)
    s, t = torch.randn(4, 5) * 3, torch.randn(4, 3)
    rows = torch.tensor([True, False, True, True])
    assert loss(s, t).item() == pytest.approx(_reference(s, t, loss.map.weight, kind), rel=1e-5)
    got = loss(s, t, rows).item()
    assert got == pytest.approx(_reference(s, t, loss.map.weight, kind, rows.tolist()), rel=1e-5)
    assert loss(s, t, torch.zeros(4, dtype=torch.bool)).item() == 0
    assert loss(s * 7, t * 0.1).item() == pytest.approx(loss(s, t).item(), rel=1e-5)  # scale-free on both sides


def test_zero_when_the_map_takes_the_student_to_the_teacher_and_the_map_learns():
    s = torch.eye(3)  # three orthonormal student vectors
    t = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])
    loss = EmbeddingDistillation(3, 2, "mse")
    with torch.no_grad():
        loss.map.weight.copy_(t.T)  # W e_i = t_i
    assert loss(s, t).item() == pytest.approx(0.0, abs=1e-7)
    fresh = EmbeddingDistillation(3, 2, "cosine")
    opt = torch.optim.SGD(fresh.parameters(), lr=0.5)
    first = fresh(s, t).item()
    for _ in range(100):
        opt.zero_grad()
        fresh(s, t).backward()
        opt.step()
    assert fresh(s, t).item() < first / 10


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"kind must be one of \['cosine', 'mse'\], got 'l1'"):
        EmbeddingDistillation(4, 2, "l1")
    with pytest.raises(ValueError, match=r"must be \(B, 4\) and \(B, 2\)"):
        EmbeddingDistillation(4, 2)(torch.randn(3, 4), torch.randn(3, 5))
