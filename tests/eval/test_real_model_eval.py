"""One small run of the harness on the real default model (marked slow)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_limited_dev_sweep_on_the_default_model(real_model, shared_data, tmp_path):
    from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate

    cache = EmbeddingCache(tmp_path / "c.sqlite")
    task = shared_data / "dev" / "sick-trial"
    report = evaluate(
        GenembedEncoder(real_model, steps=[1, 3]),
        [task],
        limit=20,
        cache=cache,
        out=tmp_path / "r.json",
        progress=False,
    )
    result = report.tasks[0]
    rows = [json.loads(line) for line in (task / "pairs.jsonl").read_text().splitlines()[:20]]
    assert result.encoding["encoded"] == len({r["s1"] for r in rows} | {r["s2"] for r in rows})  # each text once
    assert all(s > 30 for s in result.scores), result.scores  # SICK relatedness: clearly positive correlation
    rerun = evaluate(GenembedEncoder(real_model, steps=3), [task], limit=20, cache=cache, progress=False)
    assert rerun.tasks[0].encoding["encoded"] == 0
    assert rerun.tasks[0].scores == [result.scores[1]]
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["config"]["model"] == "SmolLM2-135M-Instruct" and payload["tasks"][0]["seconds"] > 0
