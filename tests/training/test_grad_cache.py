from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.encoders.shared_prefix import prefix_groups
from genembed.training import train
from genembed.training.data import ContrastiveRow, build_contrastive_batch, collate_generative, tokenize_chat
from genembed.training.data.generative import GenerativeRow
from genembed.training.forward import embed_batch, tokenize_texts
from genembed.training.grad_cache import grad_cache_single, grad_cache_step, length_sorted, split_batch
from genembed.training.lora import make_trainable
from genembed.training.losses import EmbeddingDistillation, ICRLoss, InfoNCE, NextTokenLoss, SimilarityDistillation
from genembed.training.objective import Objective

ROWS = [
    ContrastiveRow("A man is playing a guitar.", ("Someone plays the guitar on stage.",), ("The sky is blue.",), "I1"),
    ContrastiveRow("What is the capital of France?", ("Paris is the capital of France.",), (), "I2"),
    ContrastiveRow("I love this movie.", ("A wonderful, moving film.",), ("The product broke.",), "I1"),
    ContrastiveRow("Cheap flights to Rome", ("Low-cost airline tickets for Italy",), ("Tax law",), "I2"),
    ContrastiveRow("ok", ("fine, that works for me",), ("no",), "I1"),
]


def _active_lora(tiny, dropout=0.0):
    model = make_trainable(tiny.model, lora=True, r=4, alpha=8, dropout=dropout)
    with torch.no_grad():  # fresh LoRA B is zero; make the adapters active so every gradient is non-trivial
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def _batch(tokenizer, fmt):
    batch = build_contrastive_batch(ROWS, hard_negatives=1, rng=np.random.default_rng(0))
    q = tokenize_texts(tokenizer, batch.queries, batch.query_instructions, prompt_format=fmt, max_length=48)
    d = tokenize_texts(tokenizer, batch.documents, batch.document_instructions, prompt_format=fmt, max_length=48)
    return q, d, batch.label_tensor()


def _assert_single_grad_cache_matches_the_whole_batch(objective, batch, vectors):
    """grad_cache_single in chunks of 4 gives the loss and gradients of the single-text batch run whole."""
    model = objective.model
    model.zero_grad(set_to_none=True)
    plain = objective(texts=batch, teacher_texts=vectors)
    plain["objective"].backward()
    reference = _grads(model)
    model.zero_grad(set_to_none=True)
    cached = grad_cache_single(objective, batch, vectors, chunk=4)
    got = _grads(model)
    assert cached["loss"].item() == pytest.approx(plain["loss"].item(), rel=1e-5)
    assert set(got) == set(reference) and len(got) > 10
    for name, grad in got.items():
        ref = reference[name]
        assert ref.abs().sum() > 0, name
        torch.testing.assert_close(grad, ref, rtol=1e-3, atol=1e-4 * ref.abs().max().item(), msg=name)


def test_split_batch_trims_padding_and_embeds_each_row_as_the_whole_batch_does(tiny):
    q, _, _ = _batch(tiny.tokenizer, "chat")
    parts = split_batch(q, 2)
    assert [len(p.input_ids) for p in parts] == [2, 2, 1]
    assert parts[-1].attention_mask.all()  # one row: no padding column left
    assert max(p.input_ids.shape[1] for p in parts) == q.input_ids.shape[1]
    settings = EmbedSettings(steps=3)
    with torch.no_grad():
        whole = embed_batch(tiny.model, q, settings)
        chunked = torch.cat([embed_batch(tiny.model, p, settings) for p in parts])
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-5)


def test_single_text_grad_cache_chunks_shortest_first_and_keeps_the_whole_batch_gradient(tiny):
    # texts of very different lengths in a mixed order: chunked as given, every chunk pads to a long
    # text; sorted, the chunks trim most padding, and the order-free loss and its gradients are unchanged
    texts = [("word " * n).strip() for n in (12, 2, 10, 3, 11, 1, 9, 4)]
    batch = tokenize_texts(tiny.tokenizer, texts, [""] * len(texts), prompt_format="plain", max_length=128)
    vectors = torch.randn(len(texts), 6, generator=torch.Generator().manual_seed(0))
    rows, moved = length_sorted(batch, vectors)
    lengths = rows.attention_mask.sum(dim=1)
    assert (lengths[1:] >= lengths[:-1]).all()
    for row in range(len(texts)):  # each text keeps its own teacher vector
        same = [i for i in range(len(texts)) if torch.equal(moved[row], vectors[i])]
        assert len(same) == 1 and torch.equal(rows.input_ids[row], batch.input_ids[same[0]])

    def cells(b):
        return sum(part.input_ids.numel() for part in split_batch(b, 4))

    assert cells(rows) < 0.7 * cells(batch)

    model = _active_lora(tiny)
    distill = _weighted(SimilarityDistillation(0.05, 0.1), 1.0)
    regress = _weighted(EmbeddingDistillation(model.config.hidden_size, 6), 0.5)
    objective = Objective(model, EmbedSettings(steps=3), ICRLoss(0.05), terms={"distill": distill, "regress": regress})
    _assert_single_grad_cache_matches_the_whole_batch(objective, batch, vectors)


def test_single_text_grad_cache_with_shared_prefixes_chunks_by_instruction_and_keeps_the_gradient(tiny):
    # texts under five instructions in turn (as the reviews' rows give them): sorted by length alone, every
    # chunk of 4 holds four prefixes and runs four passes; grouped by prefix, most chunks run one pass
    instructions = ["Classify the topic.", "Find the product.", "Name the domain.", "", "Say what it is about."]
    texts = [("word " * (1 + (3 * n) % 7)).strip() for n in range(20)]
    given = [instructions[n % len(instructions)] for n in range(20)]
    batch = tokenize_texts(tiny.tokenizer, texts, given, prompt_format="chat", max_length=64)
    vectors = torch.randn(len(texts), 6, generator=torch.Generator().manual_seed(1))
    rows, moved = length_sorted(batch, vectors, by_prefix=True)
    for row in range(len(texts)):  # each text keeps its own teacher vector
        same = [i for i in range(len(texts)) if torch.equal(moved[row], vectors[i])]
        assert len(same) == 1 and torch.equal(rows.input_ids[row], batch.input_ids[same[0]])

    def passes(b):
        return sum(len(prefix_groups(part)) for part in split_batch(b, 4))

    assert passes(rows) <= 6 < 16 <= passes(length_sorted(batch, vectors)[0])
    groups = prefix_groups(rows)
    assert all(rows_ == list(range(rows_[0], rows_[0] + len(rows_))) for rows_, _ in groups)  # contiguous
    for rows_, _ in groups:  # shortest first within a group
        lengths = rows.attention_mask[rows_].sum(dim=1)
        assert (lengths[1:] >= lengths[:-1]).all()

    model = _active_lora(tiny)
    distill = _weighted(SimilarityDistillation(0.05, 0.1), 1.0)
    objective = Objective(model, EmbedSettings(steps=2), ICRLoss(0.05), terms={"distill": distill}, share_prefix=True)
    _assert_single_grad_cache_matches_the_whole_batch(objective, batch, vectors)


@pytest.mark.parametrize(
    ("method", "loss", "fmt"),
    [("gircse", ICRLoss(0.05, 1.0), "chat"), ("grit", InfoNCE(0.05), "plain")],
)
@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("distill", [False, True])
def test_grad_cache_gives_the_whole_batch_loss_and_gradients(tiny, method, loss, fmt, chunk, distill):
    model = _active_lora(tiny)
    settings = EmbedSettings(method=method, steps=3)
    q, d, labels = _batch(tiny.tokenizer, fmt)
    gen = None
    if method == "grit":  # the joint loss rides along on its own batch
        rows = [GenerativeRow((("user", "Say hello."), ("assistant", "Hello! How can I help you today?")))]
        gen = collate_generative([tokenize_chat(tiny.tokenizer, r, 64) for r in rows], tiny.tokenizer.pad_token_id)
    objective = Objective(
        model,
        settings,
        loss,
        NextTokenLoss("mixed") if gen is not None else None,
        0.5,
        terms={"distill": _weighted(SimilarityDistillation(0.05, 0.1), 2.0)} if distill else None,
    )
    mask, teacher = None, {}
    if distill:  # teacher scores over the 5 queries x 9 documents, a masked pair and an undistilled row
        mask = torch.zeros(5, 9, dtype=torch.bool)
        mask[0, 3] = True
        scores = torch.rand(5, 9, generator=torch.Generator().manual_seed(0))
        teacher = {"teacher_scores": scores, "distill_rows": torch.tensor([True, True, False, True, True])}

    model.zero_grad(set_to_none=True)
    plain = objective(q, d, labels, mask, gen, **teacher)
    plain["objective"].backward()
    reference = _grads(model)

    model.zero_grad(set_to_none=True)
    cached = grad_cache_step(objective, q, d, labels, mask, gen, chunk=chunk, scale=0.5, **teacher)
    got = _grads(model)

    assert cached["loss"].item() == pytest.approx(plain["loss"].item(), rel=1e-5)
    assert cached["distill"].item() == pytest.approx(plain["distill"].item(), rel=1e-5)
    assert (plain["distill"].item() > 0) == distill
    expected = plain["rep"] + 2.0 * plain["distill"] + 0.5 * plain["gen"]
    assert plain["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    torch.testing.assert_close(cached["step_losses"], plain["step_losses"].detach(), rtol=1e-5, atol=1e-6)
    assert set(got) == set(reference) and len(got) > 10
    for name, grad in got.items():
        ref = 0.5 * reference[name]
        assert ref.abs().sum() > 0, name
        torch.testing.assert_close(grad, ref, rtol=1e-3, atol=1e-4 * ref.abs().max().item(), msg=name)


def test_grad_cache_replays_dropout_so_the_gradient_matches_its_own_forward(tiny, monkeypatch):
    # with dropout, the re-run must draw the same masks as the cached pass: the loss gradient then
    # equals the gradient of the loss of the very embeddings that were cached
    import genembed.training.objective as objective_mod

    seen = []

    def recording_embed(*args, **kwargs):
        out = embed_batch(*args, **kwargs)
        seen.append(out.detach().clone())
        return out

    monkeypatch.setattr(objective_mod, "embed_batch", recording_embed)  # what Objective.embed runs
    model = _active_lora(tiny, dropout=0.3)
    objective = Objective(model, EmbedSettings(steps=2), ICRLoss(0.05, 1.0))
    q, d, labels = _batch(tiny.tokenizer, "chat")
    torch.manual_seed(5)
    model.zero_grad(set_to_none=True)
    first = grad_cache_step(objective, q, d, labels, None, None, chunk=2)
    first_grads = _grads(model)
    torch.manual_seed(5)
    model.zero_grad(set_to_none=True)
    second = grad_cache_step(objective, q, d, labels, None, None, chunk=2)
    assert first["loss"].item() == second["loss"].item()
    half = len(seen) // 4  # each call embeds every chunk twice: cached (no grad), then re-run
    for cached, rerun in zip(seen[:half], seen[half : 2 * half], strict=True):
        torch.testing.assert_close(rerun, cached)
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, first_grads[name], msg=name)
    torch.manual_seed(6)
    third = grad_cache_step(objective, q, d, labels, None, None, chunk=2)
    assert third["loss"].item() != first["loss"].item()  # dropout is on


def test_training_with_grad_cache_follows_the_plain_run(tmp_path, tiny_folder, run_config):
    runs = {}
    for chunk in (0, 4):
        cfg = run_config(tmp_path / f"run-{chunk}", tiny_folder, train={"grad_cache_chunk": chunk, "max_steps": 4})
        train(cfg)
        lines = (tmp_path / f"run-{chunk}" / "metrics.jsonl").read_text().splitlines()
        runs[chunk] = [json.loads(line)["loss"] for line in lines]
    assert len(runs[4]) == 4
    np.testing.assert_allclose(runs[4], runs[0], rtol=1e-3)
    assert runs[4][-1] != runs[4][0]  # the weights moved


def test_grad_cache_chunk_must_not_be_negative(tmp_path, tiny_folder, run_config):
    from genembed.training.config import ConfigError

    with pytest.raises(ConfigError, match="train.grad_cache_chunk must be >= 0"):
        run_config(tmp_path, tiny_folder, train={"grad_cache_chunk": -1})


def _weighted(term, weight):
    term.weight = weight
    return term
