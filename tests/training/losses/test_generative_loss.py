from __future__ import annotations

import math

import pytest
import torch

from genembed.training.losses import NextTokenLoss

IGNORE = -100


def _token_nll(logits_row, target):
    return -torch.log_softmax(logits_row, dim=-1)[target].item()


def _setup():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 7)
    labels = torch.tensor(
        [
            [IGNORE, IGNORE, 3, 4, 5, 6],  # sample 0: tokens 3,4,5,6 predicted from positions 1..4
            [IGNORE, IGNORE, IGNORE, IGNORE, 2, IGNORE],  # sample 1: one token, predicted from position 3
        ]
    )
    per_sample = [
        [_token_nll(logits[0, t - 1], labels[0, t]) for t in range(2, 6)],
        [_token_nll(logits[1, 3], 2)],
    ]
    return logits, labels, per_sample


def test_three_aggregations_by_hand():
    logits, labels, per_sample = _setup()
    tokens = [x for s in per_sample for x in s]
    expected = {
        "mixed": sum(tokens) / len(tokens),
        "token": sum(tokens) / 2,
        "sample": (sum(per_sample[0]) / 4 + per_sample[1][0]) / 2,
    }
    got = {agg: NextTokenLoss(agg)(logits, labels).item() for agg in expected}
    assert got == pytest.approx(expected, rel=1e-5)
    assert len({round(v, 5) for v in got.values()}) == 3  # the three really differ


def test_selected_positions_match_full_logits():
    logits, labels, _ = _setup()
    targets = labels[:, 1:]
    selected = targets != IGNORE
    rows = torch.arange(2)[:, None].expand_as(targets)[selected]
    for agg in ("sample", "token", "mixed"):
        loss = NextTokenLoss(agg)
        full = loss(logits, labels)
        partial = loss.loss_from_logits(logits[:, :-1][selected], targets[selected], rows, 2)
        assert partial.item() == pytest.approx(full.item(), rel=1e-6)


def test_no_response_tokens_gives_zero_with_a_graph():
    logits = torch.randn(0, 5, requires_grad=True)
    out = NextTokenLoss().loss_from_logits(
        logits, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 2
    )
    assert out.item() == 0.0 and out.requires_grad


def test_uniform_logits_give_log_vocab():
    labels = torch.tensor([[IGNORE, 1, 2]])
    assert NextTokenLoss("mixed")(torch.zeros(1, 3, 11), labels).item() == pytest.approx(math.log(11), rel=1e-6)


def test_bad_aggregation():
    with pytest.raises(ValueError, match="aggregation"):
        NextTokenLoss("batch")
