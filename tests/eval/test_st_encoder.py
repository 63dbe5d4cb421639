"""SentenceTransformerEncoder with a stand-in sentence-transformers model (no weights loaded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.eval import SentenceTransformerEncoder


class FakeST(torch.nn.Module):
    max_seq_length = 128

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.seen: list[str] = []

    def encode(self, texts, batch_size, convert_to_numpy, normalize_embeddings, show_progress_bar):
        assert convert_to_numpy and normalize_embeddings and not show_progress_bar
        self.seen += texts
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


def test_instructions_are_ignored_unless_a_template_is_given():
    model = FakeST()
    SentenceTransformerEncoder(model).encode(["a", "b"], instruction="Do X.")
    assert model.seen == ["a", "b"]
    SentenceTransformerEncoder(model, instruction_template="{instruction} {text}").encode(["c"], instruction="Do X.")
    SentenceTransformerEncoder(model, instruction_template="{instruction} {text}").encode(["d"], instruction="")
    assert model.seen[2:] == ["Do X. c", "d"]
    with pytest.raises(ValueError, match="must contain '{text}'"):
        SentenceTransformerEncoder(model, instruction_template="{instruction}")


def test_cache_key_follows_weights_and_template():
    model = FakeST()
    key = SentenceTransformerEncoder(model).cache_key
    assert SentenceTransformerEncoder(model, name="other").cache_key == key
    assert SentenceTransformerEncoder(model, instruction_template="{instruction}: {text}").cache_key != key
    with torch.no_grad():
        model.weight.add_(1)
    assert SentenceTransformerEncoder(model).cache_key != key
