"""benchmarks/rag_quality.py: each caching variant's paired gap to plain RAG, and summaries rewritten from the rows."""

from __future__ import annotations

import importlib
import json

import pytest


@pytest.fixture(scope="module")
def rag_quality():
    return importlib.import_module("rag_quality")


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


def test_base_variants_give_a_paired_gap_of_the_default_from_the_base_weights(rag_quality):
    f1 = {
        "no_rag": [0.0, 0.0, 0.0, 0.0],
        "none_doc_first": [1.0, 0.0, 1.0, 1.0],
        "base_no_rag": [0.0, 0.5, 0.0, 0.0],
        "base_doc_first": [1.0, 1.0, 1.0, 1.0],
        "doc": [1.0, 0.0, 1.0, 1.0],
    }
    summary = rag_quality.summarize(_rows(f1, {v: [0.0] * 4 for v in f1}), ("retrieved",), list(f1))["retrieved"]
    plain = summary["none_doc_first"]["vs_base"]
    assert plain["reference"] == "base_doc_first"
    assert plain["f1"]["mean"] == pytest.approx(-25.0)  # one question of four 100 F1 lower than the base weights
    assert summary["no_rag"]["vs_base"]["f1"]["mean"] == pytest.approx(-12.5)
    # the base rows are references, never compared to plain RAG or to themselves
    assert "gap" not in summary["base_doc_first"] and "vs_base" not in summary["base_doc_first"]
    assert summary["doc"]["gap"]["reference"] == "none_doc_first" and "vs_base" not in summary["doc"]


def test_squad_set_questions_are_answerable_from_their_own_passage(rag_quality):
    questions, docs = rag_quality.load_squad()
    assert len(questions) >= 200 and len(docs) == 173
    assert len({d["id"] for d in docs}) == len(docs)
    text = {d["id"]: d["text"] for d in docs}
    for q in questions:
        assert q["gold_ids"][0] in text
        assert any(answer in text[q["gold_ids"][0]] for answer in q["gold"]), q["question"]
    assert len({q["question"] for q in questions}) == len(questions)


def test_row_log_continues_a_stopped_run_and_restarts_under_other_options(rag_quality, tmp_path):
    path = tmp_path / "run.squad.rows.jsonl"
    config = {"set": "squad", "top_k": 2}
    log = rag_quality.RowLog(path, config)
    assert log.done == []
    log.append({"question": "q1", "hit": True})
    log.append({"question": "q2", "hit": False})
    with path.open("a") as handle:
        handle.write('{"question": "q3", "hi')  # a crash in the middle of a row
    again = rag_quality.RowLog(path, config)
    assert [r["question"] for r in again.done] == ["q1", "q2"]
    assert path.read_text().splitlines()[1:] == [json.dumps(r) for r in again.done]  # the torn row is gone
    other = rag_quality.RowLog(path, {**config, "top_k": 3})
    assert other.done == [] and path.read_text().splitlines() == [json.dumps({"set": "squad", "top_k": 3})]
