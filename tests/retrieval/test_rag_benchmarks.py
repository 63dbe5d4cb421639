"""benchmarks/rag_quality.py's paired gaps and benchmarks/block_attention_probe.py's cached layout."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def rag_quality(load_script):
    return load_script("benchmarks/rag_quality.py")


@pytest.fixture(scope="module")
def probe(load_script):
    return load_script("benchmarks/block_attention_probe.py")


def _rows(f1: dict[str, list[float]], nll: dict[str, list[float]]) -> list[dict]:
    n = len(next(iter(f1.values())))
    return [
        {"hit": i % 2 == 0, **{f"retrieved/{v}": {"f1": f1[v][i], "contains": 0.0, "gold_nll": nll[v][i]} for v in f1}}
        for i in range(n)
    ]


def test_each_caching_variant_gets_its_paired_gap_to_plain_rag_in_the_same_order(rag_quality):
    f1 = {
        "none_doc_first": [1.0, 0.5, 0.0, 1.0],
        "none_query_first": [0.0, 0.0, 0.0, 0.0],
        "doc@0.2": [0.5, 0.5, 0.0, 1.0],
        "querydoc": [0.25, 0.25, 0.25, 0.25],
        "query": [1.0, 0.5, 0.0, 1.0],
    }
    nll = {v: [0.1 * i for i in range(4)] for v in f1}
    nll["doc@0.2"] = [0.1 * i + 0.05 for i in range(4)]
    summary = rag_quality.summarize(_rows(f1, nll), ("retrieved",), list(f1))
    whole = summary["retrieved"]
    assert whole["questions"] == 4 and summary["retrieved_hit"]["questions"] == 2
    doc = whole["doc@0.2"]["gap"]
    assert doc["reference"] == "none_doc_first"
    assert doc["f1"]["mean"] == pytest.approx(-12.5)  # one question 50 F1 lower, of four
    low, high = doc["f1"]["ci95"]
    assert -50.0 <= low <= -12.5 <= high <= 0.0
    assert doc["gold_nll"]["mean"] == pytest.approx(0.05) and doc["gold_nll"]["ci95"] == pytest.approx([0.05, 0.05])
    assert whole["querydoc"]["gap"]["reference"] == "none_query_first"  # querydoc puts the query first
    assert whole["querydoc"]["gap"]["f1"]["mean"] == pytest.approx(25.0)
    assert whole["query"]["gap"]["f1"] == {"mean": 0.0, "ci95": [0.0, 0.0]}
    assert "gap" not in whole["none_doc_first"] and "gap" not in whole["none_query_first"]
    # without its reference in the run, a variant has means but no gap
    alone = rag_quality.summarize(_rows({"doc": f1["doc@0.2"]}, {"doc": nll["doc@0.2"]}), ("retrieved",), ["doc"])
    assert alone["retrieved"]["doc"]["f1"] == pytest.approx(50.0) and "gap" not in alone["retrieved"]["doc"]


def test_resummarize_rewrites_summaries_from_the_per_question_rows(rag_quality, tmp_path):
    f1 = {"none_doc_first": [1.0, 0.0], "doc": [0.0, 0.0]}
    rows = _rows(f1, {v: [0.0, 0.0] for v in f1})
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"sets": {"extractive": {"summary": {"stale": 1}, "per_question": rows}}}))
    rag_quality.resummarize(path)
    result = json.loads(path.read_text())["sets"]["extractive"]
    assert result["per_question"] == rows
    assert result["summary"] == rag_quality.summarize(rows, ("retrieved",), ["none_doc_first", "doc"])
    assert result["summary"]["retrieved"]["doc"]["gap"]["f1"]["mean"] == pytest.approx(-50.0)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"summary": {}, "per_question": rows}))
    with pytest.raises(SystemExit, match="old.json: no 'sets'"):
        rag_quality.resummarize(old)


def test_probe_cached_layout_is_assembles_and_isolates_only_later_segments(probe, tiny_model):
    from genembed.retrieval.kv_ops import cache_layers
    from genembed.retrieval.rag_prompt import RagPrompt

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
