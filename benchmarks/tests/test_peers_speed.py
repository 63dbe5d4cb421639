"""benchmarks/peers_speed.py: best rounds, cost ratios and the tables."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="module")
def peers():
    return importlib.import_module("peers_speed")


def test_ratios_are_costs_per_text_of_the_best_rounds(peers):
    times = {"minilm": [1.0, 0.5], "mpnet": [2.0, 3.0], "default_k1": [4.0, 5.0], "default_k5": [6.0, 5.0]}
    summary = peers.summarize(times, n_texts=10)
    assert summary["best_seconds"] == {"minilm": 0.5, "mpnet": 2.0, "default_k1": 4.0, "default_k5": 5.0}
    assert summary["texts_per_s"]["mpnet"] == 5.0
    assert summary["ratios"] == {
        "default_k5/mpnet": 2.5,
        "default_k1/mpnet": 2.0,
        "default_k5/minilm": 10.0,
        "default_k1/minilm": 8.0,
        "default_k5/default_k1": 1.25,
    }


def test_a_subset_of_systems_reports_only_its_ratios(peers):
    summary = peers.summarize({"mpnet": [2.0], "default_k5": [3.0]}, n_texts=4)
    assert summary["ratios"] == {"default_k5/mpnet": 1.5}
    table = peers.markdown([{"threads": 2, "set": "short", **summary}])
    assert "| 2 | short | 2.0 | 1.3 |" in table and "| 2 | short | 1.50x |" in table
    assert "MiniLM" not in table


def test_rounds_interleave_systems_after_a_warm_up(peers):
    calls = []
    systems = {"a": lambda texts: calls.append("a"), "b": lambda texts: calls.append("b")}
    times = peers.run_rounds(systems, ["x"], rounds=2)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert {name: len(t) for name, t in times.items()} == {"a": 2, "b": 2}
