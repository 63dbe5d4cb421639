"""experiments/wording_transfer.py: an instruct task scored under other instruction wordings."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from genembed.eval.metrics import cluster_v_measure


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("wording_transfer")


def test_each_wording_set_scores_every_axis_under_every_instruction(script, tiny_model, toy_tasks, tmp_path):
    from genembed.eval import EmbeddingCache, load_task

    task = toy_tasks / "toy-instruct"
    wordings = {"mine": {"sentiment": "Is it good or bad?", "domain": "What is it about?"}}
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    out = script.scores_by_wording(task, wordings, tiny_model, steps=[1, 2], seeds=3, center=False, cache=cache)
    scores = out["mine"]["scores"]
    assert set(scores) == {"sentiment<-own", "sentiment<-domain", "domain<-own", "domain<-sentiment"}
    data = load_task(task).data
    # the cells are genembed eval's metric on the model's own embeddings under the substituted wording
    z = tiny_model.encode(data.texts, instruction="What is it about?", steps=2, return_all_steps=True)
    for v, k in enumerate([1, 2]):
        cell = scores["sentiment<-domain"][v]
        assert cell["K"] == k
        assert cell["seed42"] == pytest.approx(cluster_v_measure(z[:, v], data.labels["sentiment"]), abs=1e-6)
        seeds = [cluster_v_measure(z[:, v], data.labels["sentiment"], seed=s) for s in range(3)]
        assert cell["mean"] == pytest.approx(np.mean(seeds), abs=1e-6)
    # the task folder itself is left as it was
    assert json.loads((task / "task.json").read_text())["instructions"]["domain"] == "Domain?"
    text = script.markdown(
        {"task": "toy", "config": {"adapter": "x", "steps": [1, 2], "seeds": 3}, "wordings": out, "command": "c"}
    )
    assert "| mine | sentiment<-domain |" in text and '"What is it about?"' in text


def test_a_wording_set_must_name_the_tasks_axes(script, tiny_model, toy_tasks):
    with pytest.raises(SystemExit, match=r"names axes \['tone'\], the task has \['domain', 'sentiment'\]"):
        script.scores_by_wording(toy_tasks / "toy-instruct", {"bad": {"tone": "x"}}, tiny_model, steps=[1], seeds=0)
