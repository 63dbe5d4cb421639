"""A few checks on the real default model (SmolLM2-135M-Instruct): meaning, not only shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

PAIRS = [
    ("A man is playing a guitar.", "Someone is playing an acoustic guitar.", "The stock market fell sharply today."),
    ("How do I reset my password?", "I forgot my password, how can I change it?", "The recipe needs two eggs."),
    ("The cat sleeps on the sofa.", "A cat is napping on the couch.", "Parliament passed the new budget."),
]


# The raw backbone is not an embedding model: single-pass pooling already separates paraphrases,
# while untrained GIRCSE soft tokens do not (measured margins ~0 to -0.05 on these pairs). GIRCSE
# meaning checks belong with the trained default adapter.
@pytest.mark.parametrize("method", ["mean", "last"])
def test_paraphrase_scores_higher_than_unrelated(real_model, method):
    for anchor, paraphrase, unrelated in PAIRS:
        emb = real_model.encode([anchor, paraphrase, unrelated], method=method, steps=3)
        assert float(emb[0] @ emb[1]) > float(emb[0] @ emb[2]), (method, anchor)


def test_real_model_kv_cache_equals_recompute(real_model):
    from genembed.encoders import EmbedSettings, RunOptions, encode_texts

    texts = ["short text", "a noticeably longer text so that the batch needs padding"]
    cached, _ = encode_texts(real_model.backbone, texts, EmbedSettings.build(steps=3), run=RunOptions(fast_path=False))
    full, _ = encode_texts(real_model.backbone, texts, EmbedSettings.build(steps=3, use_cache=False))
    assert np.abs(cached.numpy() - full.numpy()).max() < 1e-3
    # The CPU fast path (oneDNN kernels) sums in another order; over 30 layers and 3 fed-back soft
    # tokens that moves hidden states by ~1e-3, the embeddings' directions by far less.
    fast, _ = encode_texts(real_model.backbone, texts, EmbedSettings.build(steps=3))
    cos = torch.nn.functional.cosine_similarity(fast, full, dim=-1)
    assert float(cos.min()) > 0.99999


def test_real_model_batch_invariance(real_model):
    text = "Embeddings must not depend on the batch."
    alone = real_model.encode(text, steps=3)
    mixed = real_model.encode(["A much longer neighbour text. " * 6, text, "x"], steps=3)
    assert float(alone @ mixed[1]) > 0.9999


def test_soft_tokens_speak_the_texts_language(real_model):
    steps = real_model.inspect("How do plants make their food?", steps=3, top=10)
    words = {tok.strip().lower() for s in steps for tok, _ in s.tokens}
    assert words & {"plants", "plant", "food", "photosynthesis", "make"}


# What genembed.load() gives (backbone + the shipped GIRCSE adapter): the trained soft tokens do
# carry meaning, with the margin growing from the raw model's ~0, and the instruction matters.
def test_the_default_adapter_separates_paraphrases_with_gircse(default_model, real_model):
    for anchor, paraphrase, unrelated in PAIRS:
        texts = [anchor, paraphrase, unrelated]
        emb = default_model.encode(texts, instruction="Retrieve semantically similar text.", steps=5)
        raw = real_model.encode(texts, instruction="Retrieve semantically similar text.", steps=5)
        margin, raw_margin = (float(e[0] @ e[1] - e[0] @ e[2]) for e in (emb, raw))
        assert margin > 0.1 and margin > raw_margin + 0.1, (anchor, margin, raw_margin)


def test_the_default_adapter_follows_the_instruction(default_model):
    texts = ["I can't believe they cancelled my flight again, this is outrageous!"]
    emotion = default_model.encode(texts, instruction="Classify the emotion expressed in the given text.")
    intent = default_model.encode(texts, instruction="Given a customer query, find the customer's intent.")
    assert float(emotion[0] @ intent[0]) < 0.99  # the same text, two different embeddings


# The shipped default (configs/joint-stage-3.yaml): trained with a next-token loss too, so the same weights
# embed, generate and rerank; its former folder name still loads it.
def test_the_default_embeds_and_generates_with_one_set_of_weights():
    import genembed

    joint = genembed.load(dtype="float32")
    assert joint.generation_adapter == "adapter" and joint.center is True
    former = genembed.load(adapter="smollm2-135m-gircse", dtype="float32")  # the folder's former name
    assert (former.adapter, former.adapter_path) == ("smollm2-135m-joint", joint.adapter_path)
    for anchor, paraphrase, unrelated in PAIRS:
        emb = joint.encode([anchor, paraphrase, unrelated], instruction="Retrieve semantically similar text.", steps=5)
        assert float(emb[0] @ emb[1] - emb[0] @ emb[2]) > 0.1, anchor
    assert "Paris" in joint.generate("What is the capital of France?", max_new_tokens=16)
