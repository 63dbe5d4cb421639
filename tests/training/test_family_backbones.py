"""GIRCSE on top of a decoder-embedder family: soft tokens after the family's own prompt, trained with ICR
on a tiny Qwen3-architecture embedding checkpoint (saved as Qwen3-Embedding saves it: no LM head)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import genembed
from genembed.backbone import Backbone
from genembed.training import train

from ..golden.make_family_golden import build_family_folder

QWEN3 = "Qwen/Qwen3-Embedding-0.6B"
TEXTS = ["A man is playing a guitar.", "Paris is the capital of France."]


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory):
    return build_family_folder("qwen3-embedding", tmp_path_factory.mktemp("qwen3") / "tiny-qwen3-embedding")


def test_gircse_runs_after_the_familys_own_prompt(qwen3_folder, tmp_path):
    model = genembed.load(qwen3_folder, as_published=QWEN3, method="gircse", steps=2, dtype="float32", device="cpu")
    assert (model.method, model.prompt_format, model.steps) == ("gircse", "qwen3-embedding", 2)
    family = genembed.load(qwen3_folder, as_published=QWEN3, dtype="float32", device="cpu")
    soft, last = model.encode_query(TEXTS), family.encode_query(TEXTS)
    assert soft.shape == last.shape == (2, 32) and np.isfinite(soft).all()
    assert not np.allclose(soft, last, atol=1e-3)  # soft tokens, not the last prompt token


def test_an_untied_checkpoint_without_an_lm_head_generates_from_its_input_embeddings(tmp_path):
    """gte-Qwen2-7B saves the bare stack with untied embeddings: its LM head is read as the input embeddings."""
    folder = build_family_folder("gte-qwen2-7b", tmp_path / "gte")
    model = genembed.load(folder, as_published="Alibaba-NLP/gte-Qwen2-7B-instruct", method="gircse", steps=2)
    lm = model.backbone.model
    assert lm.get_output_embeddings().weight is lm.get_input_embeddings().weight
    assert model.prompt_format == "e5"
    assert np.isfinite(model.encode_query(TEXTS)).all()


def test_icr_training_on_a_qwen3_embedding_backbone(qwen3_folder, tmp_path, run_config):
    out = tmp_path / "run"
    cfg = run_config(out, qwen3_folder, embedding={"steps": 2, "prompt_format": "qwen3-embedding"})
    result = train(cfg)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == cfg.train.max_steps and all(np.isfinite(r["loss"]) for r in records)
    assert {"L_1", "L_2"} <= set(records[0]) and "L_3" not in records[0]
    assert (out / "adapter_model.safetensors").is_file()

    loaded = genembed.load(
        qwen3_folder, as_published=QWEN3, adapter=out, method="gircse", steps=2, dtype="float32", device="cpu"
    )
    assert loaded.prompt_format == "qwen3-embedding" and loaded.center is False
    trained = genembed.GenerativeEmbedder(Backbone(result.model, result.tokenizer, "trained"))
    settings = {"method": "gircse", "steps": 2, "prompt_format": "qwen3-embedding"}
    expected = trained.encode(TEXTS, instruction="Retrieve similar text.", **settings)
    np.testing.assert_allclose(loaded.encode(TEXTS, instruction="Retrieve similar text."), expected, atol=1e-5)
    base = genembed.load(qwen3_folder, as_published=QWEN3, method="gircse", steps=2, dtype="float32", device="cpu")
    assert not np.allclose(base.encode(TEXTS, instruction="Retrieve similar text."), expected, atol=1e-3)
