from __future__ import annotations

import math

import pytest
import torch

from genembed.training.losses import SimilarityDistillation


def _reference(q, d, teacher, t_student, t_teacher, mask=None, rows=None):
    """Plain-Python KL(softmax(teacher/T_t) || softmax(cos/T_s)) over each query's unmasked documents."""

    def softmax(values):
        top = max(values)
        exps = [math.exp(v - top) for v in values]
        return [e / sum(exps) for e in exps]

    kls = []
    for i, qi in enumerate(q.tolist()):
        if rows is not None and not rows[i]:
            continue
        keep = [j for j in range(len(d)) if mask is None or not mask[i][j]]
        cos = [
            sum(a * b for a, b in zip(qi, d[j].tolist(), strict=True)) / (math.hypot(*qi) * math.hypot(*d[j].tolist()))
            for j in keep
        ]
        p_s = softmax([c / t_student for c in cos])
        p_t = softmax([teacher[i][j] / t_teacher for j in keep])
        kls.append(sum(pt * math.log(pt / ps) for pt, ps in zip(p_t, p_s, strict=True)))
    return sum(kls) / len(kls) if kls else 0.0


def test_matches_the_reference_without_a_mask():
    torch.manual_seed(0)
    q, d, t = torch.randn(3, 5), torch.randn(6, 5), torch.rand(3, 6) * 2 - 1
    got = SimilarityDistillation(0.1, 0.05)(q, d, t).item()
    assert got == pytest.approx(_reference(q, d, t.tolist(), 0.1, 0.05), rel=1e-5)
    assert got > 0


def test_masked_documents_and_undistilled_rows_are_left_out():
    torch.manual_seed(1)
    q, d, t = torch.randn(4, 6), torch.randn(8, 6), torch.rand(4, 8)
    mask = torch.zeros(4, 8, dtype=torch.bool)
    mask[0, 3] = mask[1, [0, 5, 6]] = mask[3, 7] = True
    rows = torch.tensor([True, True, False, True])
    loss = SimilarityDistillation(0.05, 0.1)
    got = loss(q, d, t, mask, rows).item()
    assert got == pytest.approx(_reference(q, d, t.tolist(), 0.05, 0.1, mask.tolist(), rows.tolist()), rel=1e-5)
    # a masked entry's teacher score and an undistilled row's scores do not matter at all
    changed = t.clone()
    changed[0, 3], changed[1, 5], changed[2] = 50.0, -50.0, torch.rand(8)
    assert loss(q, d, changed, mask, rows).item() == pytest.approx(got, rel=1e-6)
    assert loss(q, d, t, None, rows).item() != pytest.approx(got, rel=1e-3)
    assert loss(q, d, t, mask).item() != pytest.approx(got, rel=1e-3)


def test_gradients_are_finite_with_a_mask_and_reach_only_distilled_rows():
    torch.manual_seed(2)
    q, d = torch.randn(3, 4, requires_grad=True), torch.randn(6, 4, requires_grad=True)
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, 1] = mask[2, 4] = True
    SimilarityDistillation(0.05, 0.05)(q, d, torch.rand(3, 6), mask, torch.tensor([True, False, True])).backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(d.grad).all()
    assert q.grad[1].abs().sum() == 0 and q.grad[0].abs().sum() > 0 and q.grad[2].abs().sum() > 0


def test_zero_when_the_student_has_the_teachers_distribution_and_when_no_row_is_distilled():
    torch.manual_seed(3)
    q, d = torch.randn(3, 8), torch.randn(6, 8)
    cos = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(d, dim=-1).T
    # teacher scores that give the same softmax: the student's cosines scaled by T_t / T_s, plus a row shift
    teacher = cos * (0.1 / 0.02) + torch.tensor([[1.0], [-2.0], [0.5]])
    loss = SimilarityDistillation(0.02, 0.1)
    assert loss(q, d, teacher).item() == pytest.approx(0.0, abs=1e-5)
    assert loss(q, d, torch.rand(3, 6), rows=torch.zeros(3, dtype=torch.bool)).item() == 0.0


def test_temperatures_are_used_and_checked():
    torch.manual_seed(4)
    q, d, t = torch.randn(2, 4), torch.randn(4, 4), torch.rand(2, 4)
    base = SimilarityDistillation(0.05, 0.05)(q, d, t).item()
    assert SimilarityDistillation(0.02, 0.05)(q, d, t).item() != pytest.approx(base, rel=1e-3)
    assert SimilarityDistillation(0.05, 0.1)(q, d, t).item() != pytest.approx(base, rel=1e-3)
    with pytest.raises(ValueError, match="temperatures must be > 0"):
        SimilarityDistillation(0.05, 0.0)
    with pytest.raises(ValueError, match=r"teacher_scores \(2, 3\) must be \(queries, documents\) = \(2, 4\)"):
        SimilarityDistillation()(q, d, torch.rand(2, 3))
