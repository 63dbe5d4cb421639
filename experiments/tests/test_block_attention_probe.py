"""experiments/block_attention_probe.py: the cached layout, the KL loss and the training file reader."""

from __future__ import annotations

import importlib
import json

import pytest
import torch


@pytest.fixture(scope="module")
def probe():
    return importlib.import_module("block_attention_probe")


def test_probe_cached_layout_is_assembles_and_isolates_only_later_segments(probe, tiny_model):
    from genembed.generation.rag_prompt import RagPrompt
    from genembed.retrieval.kv_ops import cache_layers

    item = {"question": "Which river?", "passages": ["The Rhine flows north.", "Bananas are yellow fruit."]}
    assert probe.check_against_assemble(tiny_model, RagPrompt(), item) < 1e-4
    tok, lm = tiny_model.backbone.tokenizer, tiny_model.backbone.model
    head, segments, _ = probe.layout(tok, RagPrompt(), item, "doc")
    with torch.inference_mode():
        cached, n = probe.prompt_cache(lm, head, segments, isolate=True)
        full, n_full = probe.prompt_cache(lm, head, segments, isolate=False)
    assert n == n_full == len(head) + sum(len(ids) for ids, _ in segments)
    first = len(head) + len(segments[0][0])
    second = first + len(segments[1][0])
    keys, full_keys = cache_layers(cached)[-1][0], cache_layers(full)[-1][0]
    assert torch.allclose(keys[:, :, :first], full_keys[:, :, :first], atol=1e-5)  # the first passage is exact
    assert (keys[:, :, first:second] - full_keys[:, :, first:second]).abs().max() > 1e-3  # the second is isolated


def test_probe_kl_is_zero_only_for_equal_distributions(probe):
    teacher = torch.randn(3, 11)
    assert float(probe.kl_loss(teacher, teacher)) == pytest.approx(0.0, abs=1e-6)
    student = torch.randn(3, 11)
    expected = torch.nn.functional.kl_div(
        student.log_softmax(-1), teacher.log_softmax(-1), log_target=True, reduction="batchmean"
    )
    assert float(probe.kl_loss(teacher, student)) == pytest.approx(float(expected), rel=1e-5)
    assert float(probe.kl_loss(teacher, student)) > 0


def test_probe_train_file_cuts_passages_and_names_a_bad_line(probe, tmp_path):
    good = tmp_path / "qa.jsonl"
    rows = [
        {"query": "Who built it?", "pos": ["Gustave Eiffel's company built the tower in 1889 ."], "neg": []},
        {"query": "What is it made of?", "pos": ["It is made of wrought iron ."], "neg": ["Paris is big ."]},
    ]
    good.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", "utf-8")
    loaded, pool = probe.train_file(good, 3)
    assert [r["pos"] for r in loaded] == [["Gustave Eiffel's company"], ["It is made"]]
    assert loaded[1]["neg"] == ["Paris is big"]
    assert pool == ["Gustave Eiffel's company", "It is made", "Paris is big"]
    assert probe.train_file(good, 0)[0][0]["pos"] == rows[0]["pos"]  # 0: whole passages

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"query": "Why?"}) + "\n", "utf-8")
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: missing field 'pos'"):
        probe.train_file(bad, 0)
    bad.write_text(json.dumps({"query": "Why?", "pos": []}) + "\n", "utf-8")
    with pytest.raises(SystemExit, match=r"bad\.jsonl:1: field 'pos' is empty"):
        probe.train_file(bad, 0)
