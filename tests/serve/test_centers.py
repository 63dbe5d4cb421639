"""Centering in the server: the named instructions' centers are ready before the first request, the
centers of other instructions are bounded, and ``center_named_only`` leaves those uncentered."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from fastapi.testclient import TestClient

import genembed
from genembed.encoders import center_files
from genembed.encoders.centering import center_cache
from genembed.model import GenerativeEmbedder
from genembed.serve import ServeSettings, create_app

TEXTS = ["The quick brown fox.", "Paris is the capital of France.", "I loved this film."]


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv(center_files.CACHE_ENV, "off")  # every center not in memory is computed


def _centering(backbone) -> GenerativeEmbedder:
    return GenerativeEmbedder(copy.deepcopy(backbone), center=True)  # K=5, the server's default too


def _embed(client, **body) -> np.ndarray:
    response = client.post("/v1/embeddings", json={"input": TEXTS, **body})
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


def test_named_centers_are_ready_before_the_first_request(_tiny_backbone):
    model = _centering(_tiny_backbone)
    app = create_app(model, ServeSettings())
    cache = center_cache(model.backbone)
    assert cache.computed == 0  # nothing before start-up
    with TestClient(app) as client:
        named = set(app.state.genembed.instructions.values())
        assert cache.computed == len(named) and len(named) == 5
        got = _embed(client, input_type="classification")
        assert cache.computed == len(named)  # the first request computed no center
        reference = _centering(_tiny_backbone)
        instruction = app.state.genembed.instructions["classification"]
        np.testing.assert_allclose(got, reference.encode(TEXTS, instruction=instruction), atol=1e-5)


def test_centers_stored_with_the_model_are_not_computed_at_start(_tiny_backbone, tmp_path):
    model = _centering(_tiny_backbone)
    model.prompts.update(classification="Classify the given text.", clustering="Group by topic.")
    loaded = genembed.load(model.save(tmp_path / "saved"))
    app = create_app(loaded, ServeSettings())
    with TestClient(app) as client:
        # stored: every name the server answers (the model's prompts are the one table of named instructions)
        assert center_cache(loaded.backbone).computed == 0
        _embed(client, input_type="clustering")
        _embed(client, input_type="search_query")
        _embed(client, task="text-matching")
        assert center_cache(loaded.backbone).computed == 0


def test_other_instructions_are_bounded_and_cannot_push_out_the_named_ones(_tiny_backbone):
    model = _centering(_tiny_backbone)
    app = create_app(model, ServeSettings(center_cache_size=2))
    cache = center_cache(model.backbone)
    with TestClient(app) as client:
        warmed = cache.computed
        for i in range(4):
            _embed(client, instruction=f"Ad-hoc task {i}.")
            assert len(cache) <= 2
        assert cache.computed == warmed + 4
        _embed(client, input_type="classification")
        _embed(client, instruction="Ad-hoc task 3.")  # among the latest two
        assert cache.computed == warmed + 4


def test_center_named_only_leaves_other_instructions_uncentered(_tiny_backbone):
    model = _centering(_tiny_backbone)
    app = create_app(model, ServeSettings(center_named_only=True))
    reference = _centering(_tiny_backbone)
    cache = center_cache(model.backbone)
    with TestClient(app) as client:
        warmed = cache.computed
        got = _embed(client, instruction="Ad-hoc task.")
        np.testing.assert_allclose(got, reference.encode(TEXTS, instruction="Ad-hoc task.", center=False), atol=1e-5)
        named = _embed(client, input_type="search_query")
        np.testing.assert_allclose(named, reference.encode_query(TEXTS), atol=1e-5)
        assert cache.computed == warmed and len(cache) == 0


def test_a_model_without_centering_warms_nothing(_tiny_backbone):
    model = GenerativeEmbedder(copy.deepcopy(_tiny_backbone))
    with TestClient(create_app(model, ServeSettings())):
        assert center_cache(model.backbone).computed == 0


def test_bad_cache_size_is_refused():
    with pytest.raises(ValueError, match="center_cache_size must be an int >= 0"):
        ServeSettings(center_cache_size=-1)
