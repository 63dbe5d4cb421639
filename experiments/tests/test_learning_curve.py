"""The learning curve adds examples and hours up along a chain of stages and reads their dev means."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import learning_curve  # noqa: E402


def _stage(folder: Path, steps: list[dict], fast: float | None = None, full: list[float] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    if fast is not None:
        (folder / "fast_dev.json").write_text(json.dumps({"fast_mean": fast}))
    if full is not None:
        (folder / "eval_full.json").write_text(json.dumps({"tasks": [{"scores": {"K=5": s}} for s in full]}))
    return folder


def test_points_accumulate_along_the_chain(tmp_path):
    start = _stage(tmp_path / "start", [], fast=60.0, full=[61.0, 62.0])
    one = _stage(
        tmp_path / "s1",
        [
            {"seconds": 1800, "objective": "contrastive", "rows": {"a.jsonl": 16}},
            {"seconds": 1800, "objective": "single", "rows": {"b.jsonl": 128}},
        ],
        fast=61.0,
    )
    two = _stage(tmp_path / "s2", [{"seconds": 3600, "rows": {"a.jsonl": 10, "c.jsonl": 6}}], fast=62.5, full=[63, 64])
    points = learning_curve.chain_points(start, [one, two])
    assert [(p["examples"], p["hours"]) for p in points] == [(0, 0.0), (144, 1.0), (160, 2.0)]
    assert [p.get("fast") for p in points] == [60.0, 61.0, 62.5]
    assert [p.get("full") for p in points] == [61.5, None, 63.5]
    assert points[1]["examples_by_objective"] == {"contrastive": 16, "single": 128}
    pytest.importorskip("matplotlib")
    learning_curve.plot({"kl": points}, tmp_path / "curve.png", {"MiniLM": 63.69})
    assert (tmp_path / "curve.png").stat().st_size > 5_000


def test_a_reference_line_is_the_reports_mean_and_a_report_without_one_is_named(tmp_path):
    (tmp_path / "minilm.json").write_text(json.dumps({"mean": {"score": 63.6924, "scores": {"single": 63.6924}}}))
    assert learning_curve.reference_mean(tmp_path / "minilm.json") == 63.69
    (tmp_path / "other.json").write_text(json.dumps({"tasks": []}))
    with pytest.raises(SystemExit, match="other.json is not a dev report: it has no mean.score"):
        learning_curve.reference_mean(tmp_path / "other.json")
