from __future__ import annotations

import pytest
import torch

from genembed.training.losses import BaseDistillLoss, GenerativeLoss, NextTokenLoss, build_generative_loss


def _kl_by_hand(model_row, base_row, t=1.0):
    p = torch.softmax(base_row / t, -1)
    q = torch.softmax(model_row / t, -1)
    return float((p * (p.log() - q.log())).sum()) * t * t


def test_kl_matches_a_hand_computation_for_each_aggregation():
    torch.manual_seed(0)
    logits, base = torch.randn(5, 11), torch.randn(5, 11)
    rows = torch.tensor([0, 0, 0, 1, 1])
    per = [_kl_by_hand(logits[i], base[i]) for i in range(5)]
    expected = {
        "mixed": sum(per) / 5,
        "token": sum(per) / 2,
        "sample": (sum(per[:3]) / 3 + sum(per[3:]) / 2) / 2,
    }
    for aggregation, value in expected.items():
        got = BaseDistillLoss(aggregation).loss_from_logits(logits, base, rows, 2)
        assert got.item() == pytest.approx(value, rel=1e-5), aggregation


def test_temperature_softens_both_distributions_and_scales_by_its_square():
    torch.manual_seed(1)
    logits, base = torch.randn(3, 7), torch.randn(3, 7)
    rows = torch.tensor([0, 1, 2])
    got = BaseDistillLoss(temperature=2.0).loss_from_logits(logits, base, rows, 3)
    expected = sum(_kl_by_hand(logits[i], base[i], 2.0) for i in range(3)) / 3
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_zero_when_the_model_agrees_with_the_base_and_no_gradient_reaches_the_targets():
    torch.manual_seed(2)
    base = torch.randn(4, 9, requires_grad=True)
    same = base.detach().clone().requires_grad_(True)
    loss = BaseDistillLoss().loss_from_logits(same, base, torch.tensor([0, 0, 1, 1]), 2)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    shifted = (base.detach() + 0.5 * torch.randn(4, 9)).requires_grad_(True)
    loss = BaseDistillLoss().loss_from_logits(shifted, base, torch.tensor([0, 0, 1, 1]), 2)
    loss.backward()
    assert loss.item() > 0 and shifted.grad.abs().sum() > 0 and base.grad is None


def test_no_labelled_position_keeps_the_graph():
    logits = torch.zeros(0, 5, requires_grad=True)
    loss = BaseDistillLoss().loss_from_logits(logits, torch.zeros(0, 5), torch.zeros(0, dtype=torch.long), 2)
    loss.backward()
    assert loss.item() == 0.0


def test_builder_names_the_losses_and_rejects_others():
    built = build_generative_loss("base_kl", "token", 2.0)
    assert (built.chat, built.text, built.aggregation, built.distill.temperature) == (
        "base_kl",
        "base_kl",
        "token",
        2.0,
    )
    assert (build_generative_loss("next_token", text="base_kl").text) == "base_kl"
    with pytest.raises(ValueError, match="next_token, base_kl"):
        build_generative_loss("kl")
    with pytest.raises(ValueError, match="next_token, base_kl"):
        build_generative_loss("next_token", text="kl")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        BaseDistillLoss(temperature=0)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        BaseDistillLoss("per_token")


def test_each_row_kind_takes_its_own_loss_then_one_aggregation():
    """Conversations by next-token cross-entropy, plain-text rows by the KL, aggregated together."""
    torch.manual_seed(3)
    logits, base, targets = torch.randn(5, 11), torch.randn(5, 11), torch.tensor([1, 2, 3, 4, 5])
    rows, text_rows = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([False, True])
    ce = [float(-torch.log_softmax(logits[i], -1)[targets[i]]) for i in range(2)]
    kl = [_kl_by_hand(logits[i], base[i]) for i in range(2, 5)]
    loss = GenerativeLoss("next_token", "base_kl", "sample")
    assert not loss.needs_base(torch.tensor([False, False])) and loss.needs_base(text_rows)
    got = loss.loss_from_logits(logits, targets, rows, 2, base_logits=base, text_rows=text_rows)
    assert got.item() == pytest.approx((sum(ce) / 2 + sum(kl) / 3) / 2, rel=1e-5)
    plain = GenerativeLoss("next_token").loss_from_logits(logits, targets, rows, 2, text_rows=text_rows)
    assert plain.item() == pytest.approx(NextTokenLoss("mixed").loss_from_logits(logits, targets, rows, 2).item())
    with pytest.raises(ValueError, match="base_logits"):
        loss.loss_from_logits(logits, targets, rows, 2, text_rows=text_rows)
