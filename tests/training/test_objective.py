"""The objective's generative loss: the KL to the base weights' next-token distributions (generative.loss: base_kl)."""

from __future__ import annotations

import copy

import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.generation.adapters import adapter_mode
from genembed.training.data import collate_generative, tokenize_row
from genembed.training.data.generative import GenerativeRow
from genembed.training.lora import make_trainable
from genembed.training.losses import BaseDistillLoss, GenerativeLoss, ICRLoss
from genembed.training.objective import Objective


def _active_lora(tiny):
    model = make_trainable(tiny.model, lora=True, r=4, alpha=8, dropout=0.0)
    with torch.no_grad():  # fresh LoRA B is zero: make the adapter change the model
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def test_base_kl_reads_the_base_weights_and_trains_only_the_adapter(tiny):
    """The generative KL's targets are the adapter-off logits: zero loss with a fresh (zero) LoRA B, a positive
    one with an active adapter, equal to the KL computed by hand from the base model's own logits."""
    rows = [
        GenerativeRow((("user", "Say hello."), ("assistant", "Hello! How can I help you today?"))),
        GenerativeRow((), text="Plain text is learned at every position after the first."),
    ]
    gen = collate_generative([tokenize_row(tiny.tokenizer, r, 64) for r in rows], tiny.tokenizer.pad_token_id)
    fresh = make_trainable(copy.deepcopy(tiny.model), lora=True, r=4, alpha=8, dropout=0.0)
    objective = Objective(fresh, EmbedSettings(steps=2), ICRLoss(0.05), BaseDistillLoss())
    assert objective.generative_loss(gen).item() == pytest.approx(0.0, abs=1e-6)

    model = _active_lora(tiny)
    objective = Objective(model, EmbedSettings(steps=2), ICRLoss(0.05), BaseDistillLoss())
    loss = objective.generative_loss(gen)
    with torch.no_grad():
        adapted = model(input_ids=gen.input_ids, attention_mask=gen.attention_mask).logits[:, :-1]
        with adapter_mode(model, False):
            base = model(input_ids=gen.input_ids, attention_mask=gen.attention_mask).logits[:, :-1]
    where = gen.labels[:, 1:] != -100
    p, log_q = torch.softmax(base[where], -1), torch.log_softmax(adapted[where], -1)
    expected = (p * (p.log() - log_q)).sum(-1).mean()
    assert loss.item() > 1e-4
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    model.zero_grad(set_to_none=True)
    loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert trained and all("lora_" in n for n in trained)


def test_chat_rows_by_next_token_and_text_rows_by_the_base_kl(tiny):
    """generative.loss next_token with text_loss base_kl: the conversation's tokens give their cross-entropy,
    the plain text's the KL to the adapter-off logits, one mean over all of them (aggregation mixed)."""
    rows = [
        GenerativeRow((("user", "Say hello."), ("assistant", "Hello! How can I help you today?"))),
        GenerativeRow((), text="Plain text is learned at every position after the first."),
    ]
    items = [tokenize_row(tiny.tokenizer, r, 64) for r in rows]
    gen = collate_generative(items, tiny.tokenizer.pad_token_id, [False, True])
    model = _active_lora(tiny)
    objective = Objective(model, EmbedSettings(steps=2), ICRLoss(0.05), GenerativeLoss("next_token", "base_kl"))
    loss = objective.generative_loss(gen)
    with torch.no_grad():
        adapted = model(input_ids=gen.input_ids, attention_mask=gen.attention_mask).logits[:, :-1]
        with adapter_mode(model, False):
            base = model(input_ids=gen.input_ids, attention_mask=gen.attention_mask).logits[:, :-1]
    targets = gen.labels[:, 1:]
    chat, text = targets[0] != -100, targets[1] != -100
    ce = torch.nn.functional.cross_entropy(adapted[0][chat], targets[0][chat], reduction="none")
    p, log_q = torch.softmax(base[1][text], -1), torch.log_softmax(adapted[1][text], -1)
    kl = (p * (p.log() - log_q)).sum(-1)
    assert loss.item() == pytest.approx(torch.cat([ce, kl]).mean().item(), rel=1e-4)
