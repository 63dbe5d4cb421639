from __future__ import annotations

import math

import pytest
import torch

from genembed.training.losses import ICRLoss, InfoNCE


def _embeddings(seed=0, b=3, k=4, d=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, k, d, generator=g), torch.randn(2 * b, k, d, generator=g)


def _hand(q, d, temperature, reg_weight, reduction="mean", final_only=False, regularizer=True):
    losses = [InfoNCE(temperature)(q[:, k], d[:, k]).item() for k in range(q.shape[1])]
    main = losses[-1] if final_only else (sum(losses) / len(losses) if reduction == "mean" else sum(losses))
    reg = sum(max(0.0, math.log(losses[k + 1]) - math.log(losses[k])) for k in range(len(losses) - 1))
    reg /= len(losses) - 1
    return main + (reg_weight * reg if regularizer else 0.0), losses, reg


def test_matches_hand_computation():
    q, d = _embeddings()
    expected, losses, reg = _hand(q, d, 0.05, 1.0)
    terms = ICRLoss(0.05, 1.0).terms(q, d)
    assert terms.total.item() == pytest.approx(expected, rel=1e-5)
    assert terms.step_losses.tolist() == pytest.approx(losses, rel=1e-5)
    assert terms.reg.item() == pytest.approx(reg, rel=1e-5, abs=1e-7)
    assert ICRLoss(0.05, 1.0)(q, d).item() == pytest.approx(expected, rel=1e-5)


def test_regulariser_penalises_only_increases():
    # step 2 is worse than step 1 (documents scrambled), step 3 recovers: reg = relu(logL2-logL1)/2
    q = torch.eye(3)[:, None].repeat(1, 3, 1)  # (3, 3, 3): every step embeds query i as e_i
    d = q.clone()
    d[:, 1] = torch.roll(d[:, 1], 1, dims=0)  # at step 2 the positives point elsewhere
    terms = ICRLoss(0.5, 1.0).terms(q, d)
    l1, l2, l3 = terms.step_losses.tolist()
    assert l2 > l1 and l3 == pytest.approx(l1)
    assert terms.reg.item() == pytest.approx((math.log(l2) - math.log(l1)) / 2, rel=1e-5)


def test_every_hyperparameter_changes_the_loss():
    q, d = _embeddings(1)
    base = ICRLoss(0.05, 1.0)(q, d).item()
    assert ICRLoss(0.03, 1.0)(q, d).item() != pytest.approx(base, rel=1e-4)  # temperature
    expected_reg = ICRLoss(0.05, 1.0).terms(q, d).reg.item()
    assert expected_reg > 0  # so that lambda matters on this input
    assert ICRLoss(0.05, 3.0)(q, d).item() == pytest.approx(base + 2 * expected_reg, rel=1e-5)  # lambda
    assert ICRLoss(0.05, 1.0)(q[:, :2], d[:, :2]).item() != pytest.approx(base, rel=1e-4)  # K


def test_sum_reduction_and_ablations():
    q, d = _embeddings(2)
    for kwargs, hand_kwargs in (
        ({"reduction": "sum"}, {"reduction": "sum"}),
        ({"final_step_only": True}, {"final_only": True}),
        ({"regularizer": False}, {"regularizer": False}),
        ({"final_step_only": True, "regularizer": False}, {"final_only": True, "regularizer": False}),
    ):
        expected, _, _ = _hand(q, d, 0.05, 1.0, **hand_kwargs)
        assert ICRLoss(0.05, 1.0, **kwargs)(q, d).item() == pytest.approx(expected, rel=1e-5), kwargs


def test_single_step_is_plain_info_nce():
    q, d = _embeddings(3, k=1)
    assert ICRLoss(0.05, 1.0)(q, d).item() == pytest.approx(InfoNCE(0.05)(q[:, 0], d[:, 0]).item(), rel=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="reduction"):
        ICRLoss(reduction="max")
    with pytest.raises(ValueError, match=r"\(B, K, D\)"):
        ICRLoss()(torch.randn(2, 4), torch.randn(2, 4))
