"""The fast dev protocol's definition: its tasks and the comparison with a full report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fast_dev  # noqa: E402

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "dev"


@pytest.mark.skipif(not DEV.is_dir(), reason="shared dev data not found")
def test_the_protocol_keeps_every_task_and_cuts_scifact_to_its_queries_and_300_other_documents():
    tasks = {task.name: task for task in fast_dev.fast_tasks(DEV)}
    assert len(tasks) == 8 and all(task.limit is None for name, task in tasks.items() if name != "scifact-dev")
    scifact = tasks["scifact-dev"].data
    judged = {doc for docs in scifact.qrels.values() for doc in docs}
    assert len(scifact.query_ids) == 100 and len(scifact.doc_ids) == len(judged) + 300


def test_a_missing_task_to_cut_is_named(tmp_path):
    (tmp_path / "stsb-dev").mkdir()
    (tmp_path / "stsb-dev" / "task.json").write_text('{"name": "stsb-dev", "type": "sts", "metric": "spearman"}')
    (tmp_path / "stsb-dev" / "pairs.jsonl").write_text('{"s1": "a", "s2": "b", "score": 1.0}\n')
    with pytest.raises(SystemExit, match="has no task folder 'scifact-dev'"):
        fast_dev.fast_tasks(tmp_path)


def test_compare_gives_the_full_mean_at_k5_and_each_difference():
    full = {"tasks": [{"name": "a", "scores": {"K=1": 1.0, "K=5": 50.0}}, {"name": "b", "scores": {"K=5": 70.0}}]}
    assert fast_dev.compare({"a": 52.5, "b": 69.0}, full) == {
        "full_mean": 60.0,
        "fast_minus_full": {"a": 2.5, "b": -1.0},
    }
