from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.training.data import ContrastiveRow, build_contrastive_batch, collate_generative, tokenize_chat
from genembed.training.data.generative import GenerativeRow
from genembed.training.forward import embed_batch, response_logits, running_means, tokenize_texts
from genembed.training.lora import make_trainable
from genembed.training.losses import ICRLoss, NextTokenLoss
from genembed.training.objective import Objective

ROWS = [
    ContrastiveRow("A man is playing a guitar.", ("Someone plays the guitar on stage.",), ("The sky is blue.",), "I1"),
    ContrastiveRow("What is the capital of France?", ("Paris is the capital of France.",), (), "I2"),
    ContrastiveRow("I love this movie.", ("A wonderful, moving film.",), ("The product broke.",), "I1"),
]


def _inputs(tokenizer, fmt="chat"):
    batch = build_contrastive_batch(ROWS, hard_negatives=1, rng=np.random.default_rng(0))
    q = tokenize_texts(tokenizer, batch.queries, batch.query_instructions, prompt_format=fmt, max_length=48)
    d = tokenize_texts(tokenizer, batch.documents, batch.document_instructions, prompt_format=fmt, max_length=48)
    return q, d, batch.label_tensor()


def _loss_and_grads(model, tokenizer, settings, loss=None, checkpoint_chunk=0, share_prefix=False):
    q, d, labels = _inputs(tokenizer)
    objective = Objective(
        model, settings, loss or ICRLoss(0.05, 1.0), checkpoint_chunk=checkpoint_chunk, share_prefix=share_prefix
    )
    model.zero_grad(set_to_none=True)
    out = objective(q, d, labels)
    out["objective"].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out["loss"].item(), grads


@pytest.mark.parametrize("lora", [True, False])
def test_kv_cached_training_equals_recompute(tiny, lora):
    model = make_trainable(tiny.model, lora=lora, r=4, alpha=8, dropout=0.0)
    if lora:  # fresh LoRA B is zero; make the adapters active so their gradients are non-trivial
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    cached = _loss_and_grads(model, tiny.tokenizer, EmbedSettings(steps=4, use_cache=True))
    recompute = _loss_and_grads(model, tiny.tokenizer, EmbedSettings(steps=4, use_cache=False))
    assert cached[0] == pytest.approx(recompute[0], rel=1e-4)
    assert len(cached[1]) > 10
    for name, grad in cached[1].items():
        ref = recompute[1][name]
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item(), msg=name)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny):
    model = make_trainable(tiny.model, lora=False)
    plain = _loss_and_grads(model, tiny.tokenizer, EmbedSettings(steps=3))
    chunked = _loss_and_grads(model, tiny.tokenizer, EmbedSettings(steps=3), checkpoint_chunk=2)
    assert chunked[0] == pytest.approx(plain[0], rel=1e-5)
    for name, grad in plain[1].items():
        torch.testing.assert_close(chunked[1][name], grad, rtol=1e-4, atol=1e-4 * grad.abs().max().item())


@pytest.mark.parametrize("chunk", [0, 2])
def test_shared_instruction_prefixes_give_the_same_loss_and_gradients(tiny, chunk):
    # I1's rows share their instruction's prefix (queries and symmetric documents); I2's query is alone
    model = make_trainable(tiny.model, lora=True, r=4, alpha=8, dropout=0.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    plain = _loss_and_grads(model, tiny.tokenizer, EmbedSettings(steps=3), checkpoint_chunk=chunk)
    shared = _loss_and_grads(model, tiny.tokenizer, EmbedSettings(steps=3), checkpoint_chunk=chunk, share_prefix=True)
    assert shared[0] == pytest.approx(plain[0], rel=1e-5)
    for name, grad in plain[1].items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(shared[1][name], grad, rtol=1e-4, atol=1e-4 * grad.abs().max().item(), msg=name)


def test_steps_and_tau_change_the_loss(tiny):
    model = make_trainable(tiny.model, lora=False)
    q, d, labels = _inputs(tiny.tokenizer)

    def loss(**kwargs):
        with torch.no_grad():
            return Objective(model, EmbedSettings(**kwargs), ICRLoss(0.05))(q, d, labels)["loss"].item()

    base = loss(steps=3, tau=1.0)
    assert loss(steps=2, tau=1.0) != pytest.approx(base, rel=1e-4)
    assert loss(steps=3, tau=0.3) != pytest.approx(base, rel=1e-4)


def test_gircse_embeddings_are_running_means_of_soft_token_states(tiny):
    from genembed.encoders import generate_soft_tokens

    q, _, _ = _inputs(tiny.tokenizer)
    with torch.no_grad():
        z = embed_batch(tiny.model, q, EmbedSettings(steps=3, tau=0.7))
        h = generate_soft_tokens(tiny.model, q.input_ids, q.attention_mask, steps=3, tau=0.7).hidden
    torch.testing.assert_close(z, running_means(h))
    torch.testing.assert_close(z[:, 1], (h[:, 0] + h[:, 1]) / 2)


@pytest.mark.parametrize("method", ["grit", "mean", "last"])
def test_single_pass_training_embeddings_match_the_encoder(tiny_model, method):
    """What training optimises is exactly what ``encode`` returns for the same method (the ablations'
    mean/last baselines and GRIT), padding included."""
    tok = tiny_model.backbone.tokenizer
    texts = ["A man is playing a guitar.", "Paris is the capital of France.", "ok"]
    batch = tokenize_texts(
        tok, texts, ["Retrieve semantically similar text."] * 3, prompt_format="plain", max_length=64
    )
    with torch.no_grad():
        z = embed_batch(tiny_model.backbone.model, batch, EmbedSettings(method=method))
    assert z.shape == (3, 1, tiny_model.dim)
    ref = tiny_model.encode(texts, method=method, instruction="Retrieve semantically similar text.", normalize=False)
    np.testing.assert_allclose(z[:, 0].numpy(), ref, rtol=1e-4, atol=1e-5)
    others = {m: tiny_model.encode(texts[:1], method=m, normalize=False) for m in ("grit", "mean", "last")}
    assert all(not np.allclose(others[method], v) for m, v in others.items() if m != method)


def test_per_text_instructions_are_applied(tiny):
    tok = tiny.tokenizer
    mixed = tokenize_texts(tok, ["x y", "x y"], ["first", "second"], prompt_format="plain", max_length=32)
    one = tokenize_texts(tok, ["x y"], ["second"], prompt_format="plain", max_length=32)
    assert mixed.input_ids[1, -one.input_ids.shape[1] :].tolist() == one.input_ids[0].tolist()
    assert mixed.input_ids[0].tolist() != mixed.input_ids[1].tolist()


def test_generative_head_runs_only_on_response_positions(tiny):
    rows = [
        GenerativeRow((("user", "What is the capital of France?"), ("assistant", "Paris."))),
        GenerativeRow((("user", "Say hello."), ("assistant", "Hello! How can I help you today?"))),
    ]
    batch = collate_generative([tokenize_chat(tiny.tokenizer, r, 64) for r in rows], tiny.tokenizer.pad_token_id)
    shapes = []
    handle = tiny.model.lm_head.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape)))
    logits, targets, sample_index = response_logits(tiny.model, batch)
    handle.remove()
    n_response = int((batch.labels[:, 1:] != -100).sum())
    assert shapes == [(n_response, tiny.model.config.vocab_size)]
    with torch.no_grad():
        full = tiny.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    for agg in ("sample", "token", "mixed"):
        expected = NextTokenLoss(agg)(full, batch.labels)
        got = NextTokenLoss(agg).loss_from_logits(logits, targets, sample_index, 2)
        assert got.item() == pytest.approx(expected.item(), rel=1e-4)
