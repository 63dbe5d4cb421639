from __future__ import annotations

import json

import numpy as np
import pytest

import genembed
from genembed.backbone import Backbone
from genembed.training import train


@pytest.mark.slow
def test_a_few_lora_steps_on_the_default_model_and_load_the_adapter(tmp_path, assets, run_config):
    cfg = run_config(
        tmp_path / "run",
        None,
        lora={"r": 8, "alpha": 32, "dropout": 0.05},
        embedding={"steps": 2, "query_max_length": 48, "doc_max_length": 48},
        data={"batch_size": 4},
        train={"max_steps": 3, "lr": 2e-4, "save_every": 2},
    )
    result = train(cfg)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(np.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)
    loaded = genembed.load(adapter=tmp_path / "run")
    texts = ["A man is playing a guitar.", "Paris is the capital of France."]
    trained = genembed.GenerativeEmbedder(Backbone(result.model, result.tokenizer, "trained"))
    np.testing.assert_allclose(loaded.encode(texts, steps=2), trained.encode(texts, steps=2), atol=1e-5)
