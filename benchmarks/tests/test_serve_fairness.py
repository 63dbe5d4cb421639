"""benchmarks/serve_fairness.py: the summary and table from raw latencies, and one small end-to-end run on the
tiny random model (every new instruction is centred, and the report is written as JSON and markdown)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def fairness():
    return importlib.import_module("serve_fairness")


def test_summary_compares_the_plain_clients_percentiles_and_counts_refusals(fairness):
    runs = {
        "idle": [{"plain_ms": [10.0] * 99 + [20.0], "fresh": [], "fresh_sent": 0}],
        "stream": [
            {"plain_ms": [15.0] * 99 + [30.0], "fresh": [(200, 900.0), (429, 2.0), (200, 1100.0)], "fresh_sent": 5}
        ],
    }
    summary = fairness.summarize(runs)
    assert summary["idle"]["plain"]["p50_ms"] == 10.0 and summary["stream"]["plain"]["p50_ms"] == 15.0
    assert summary["p50_ratio"] == 1.5
    assert summary["p99_ratio"] == round(summary["stream"]["plain"]["p99_ms"] / summary["idle"]["plain"]["p99_ms"], 2)
    fresh = summary["stream"]["new_instructions"]
    assert (fresh["sent"], fresh["answered"], fresh["refused_429"], fresh["other"]) == (5, 2, 1, 0)
    assert fresh["unanswered_at_phase_end"] == 2 and fresh["timed_out"] == 0
    assert fresh["p50_ms"] == 1000.0
    assert fairness.fresh_instruction(3) != fairness.fresh_instruction(11)  # each one new to the server


def test_a_small_run_on_the_tiny_model_writes_json_and_markdown(tmp_path):
    from genembed.backbone import tiny_backbone

    model, tiny = tmp_path / "tiny", tiny_backbone(seed=0)
    tiny.model.save_pretrained(model)
    tiny.tokenizer.save_pretrained(model)
    script = Path(__file__).resolve().parents[1] / "serve_fairness.py"
    command = [sys.executable, str(script), "--model", str(model), "--requests", "8", "--interval", "0.2"]
    command += ["--extra=--adapter=none", "--extra=--center", "--out", str(tmp_path / "out")]
    subprocess.run(command, check=True, timeout=600)
    report = json.loads((tmp_path / "out" / "serve_fairness.json").read_text())
    summary = report["summary"]
    assert summary["idle"]["plain"]["requests"] == summary["stream"]["plain"]["requests"] == 8
    assert summary["stream"]["new_instructions"]["sent"] >= 1
    health = report["server_health_at_end"]
    # new instructions were centred: 64 calibration texts each, in background batches that start small (half a
    # client batch) and grow, so at least two; and every centring accepted had finished
    assert health["background_batches"] >= 2
    assert health["centering_instructions"] == health["queued_centering"] == 0
    table = (tmp_path / "out" / "serve_fairness.md").read_text()
    assert "| idle | 8 |" in table and f"**{summary['p99_ratio']}**" in table
