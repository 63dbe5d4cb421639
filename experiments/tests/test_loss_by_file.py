"""experiments/loss_by_file.py: crediting each step to its data file, recorded or replayed."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("loss_by_file")


def _write_config(tmp_path: Path, assets: Path) -> Path:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, name in ((a, "a"), (b, "b")):
        path.write_text("".join(json.dumps({"query": f"{name}q{i}", "pos": [f"{name}p{i}"]}) + "\n" for i in range(12)))
    config = tmp_path / "run.yaml"
    config.write_text(
        "data:\n  files: [a.jsonl, {path: b.jsonl, weight: 24}]\n  batch_size: 4\n  hard_negatives: 0\n"
        "train:\n  seed: 3\n  grad_accum: 1\n"
    )
    return config


def test_replayed_files_match_the_recorded_rows(tmp_path, assets, script):
    from genembed.training import load_config
    from genembed.training.data import ContrastiveStream
    from genembed.training.data.streams import expand_files

    config = _write_config(tmp_path, assets)
    cfg = load_config(config)
    stream = ContrastiveStream(expand_files(cfg.data.files), batch_size=4, hard_negatives=0, seed=3)
    records = []
    for step in range(1, 9):
        stream.next()
        records.append({"step": step, "loss": float(step), "L_1": 1.0, "L_2": 2.0, "rows": stream.last_rows})
    recorded = script.step_files(config, records, world=1)
    assert set(recorded) == {"a.jsonl", "b.jsonl"}  # both files drawn in 8 steps (weights 12 : 24)
    replayed = script.step_files(config, [{k: v for k, v in r.items() if k != "rows"} for r in records], world=1)
    assert replayed == recorded
    # a run resumed from a later step replays to the same steps
    assert script.step_files(config, [{"step": 5, "loss": 0.0}], world=1) == recorded[4:5]


def test_table_averages_each_files_steps(script):
    records = [
        {"step": s, "loss": loss, "L_1": loss + 1, "L_3": loss - 1} for s, loss in enumerate([4.0, 1.0, 2.0, 3.0], 1)
    ]
    rows = script.table(records, ["x", "y", "x", "x"])
    assert [r["file"] for r in rows] == ["x", "y"]  # highest mean loss first
    x = rows[0]
    assert x["steps"] == 3 and x["mean_loss"] == pytest.approx(3.0)
    assert x["first_half"] == pytest.approx(4.0) and x["second_half"] == pytest.approx(2.5)
    assert x["L_1"] == pytest.approx(4.0) and x["L_3"] == pytest.approx(2.0)
    assert rows[1]["first_half"] is None and rows[1]["mean_loss"] == pytest.approx(1.0)
