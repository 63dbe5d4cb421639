from __future__ import annotations

import pytest
import torch

from genembed.encoders import EmbedSettings, RunOptions, encode_texts
from genembed.encoders import core as core_mod
from genembed.encoders.batching import MAX_BATCH_ROWS, length_sorted_batches


def test_batches_are_sized_by_texts_without_a_token_budget():
    lengths = [5, 50, 7, 20, 3]
    assert length_sorted_batches(lengths, 2) == [[1, 3], [2, 0], [4]]


def test_short_texts_fill_a_token_budget():
    lengths = [100, 100, 10, 10, 10, 10, 10, 10, 10, 4, 4]
    batches = length_sorted_batches(lengths, 2, max_tokens=40)
    # long texts: batch_size rows (over the budget); short ones: budget // longest of the batch
    assert batches == [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9], [10]]
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert length_sorted_batches([1] * 1000, 4, max_tokens=10**6)[0] == list(range(MAX_BATCH_ROWS))


@pytest.mark.parametrize(("batch_size", "max_tokens"), [(0, 0), (1, -1)])
def test_bad_sizes_are_refused(batch_size, max_tokens):
    with pytest.raises(ValueError, match="must be >= "):
        length_sorted_batches([1, 2], batch_size, max_tokens)
    with pytest.raises(ValueError, match="batch_tokens must be an int >= 0"):
        RunOptions(batch_tokens=-1)


@pytest.mark.parametrize("method", ["gircse", "mean"])
def test_token_sized_batches_change_no_embedding_and_keep_the_order(tiny, method, monkeypatch):
    texts = [f"text number {i} " + "word " * (i % 7) for i in range(40)] + ["a far longer text " * 12]
    rows = []
    original = core_mod.embed_prepared
    monkeypatch.setattr(
        "genembed.encoders.embedder.embed_prepared",
        lambda model, batch, *a, **k: rows.append(batch.input_ids.shape[0]) or original(model, batch, *a, **k),
    )
    settings, run = EmbedSettings.build(method=method, steps=3), RunOptions(batch_size=4)
    by_tokens, _ = encode_texts(tiny, texts, settings, run=run.replace(batch_tokens=256), instruction="Find it.")
    budget_rows = list(rows)
    rows.clear()
    by_texts, _ = encode_texts(tiny, texts, settings, run=run.replace(batch_tokens=0), instruction="Find it.")
    assert rows == [4] * 10 + [1]
    assert budget_rows[0] == 4 and max(budget_rows) > 4 and len(budget_rows) < len(rows)
    torch.testing.assert_close(by_tokens, by_texts, atol=2e-6, rtol=1e-5)
    alone, _ = encode_texts(tiny, texts[7:8], settings, run=run, instruction="Find it.")
    torch.testing.assert_close(by_tokens[7], alone[0], atol=2e-6, rtol=1e-5)
