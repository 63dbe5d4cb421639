"""A trained adapter carries the settings it was trained with (``genembed.json`` beside it): loaded, it embeds
as it was trained, without a warning; the caller's settings still win; adapters without the file load as
before."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import genembed
from genembed.models.save import SETTINGS_FILE
from genembed.models.trained_for import TRAIN_CONFIG, UntrainedAdapterWarning

TEXTS = ["A man is playing a guitar.", "Paris is the capital of France.", "The stock market fell today."]


@pytest.fixture(scope="module")
def mean_run(tmp_path_factory, tiny_folder, run_config):
    """A tiny adapter trained for two steps with mean pooling (and its base model's folder)."""
    from genembed.training.loop import train

    out = tmp_path_factory.mktemp("mean-run") / "run"
    cfg = run_config(out, tiny_folder, embedding={"method": "mean", "steps": 1}, train={"max_steps": 2})
    train(cfg)
    return out


def test_train_writes_the_settings_it_trained_with_beside_the_adapter(mean_run, tiny_folder):
    saved = json.loads((mean_run / SETTINGS_FILE).read_text())
    assert saved["encode"]["method"] == "mean" and saved["encode"]["attention"] == "causal"
    assert saved["encode"]["center"] is False and saved["encode"]["truncate_dim"] is None
    assert saved["adapter"] == "run" and saved["backbone"]["name"] == tiny_folder.name
    assert not saved["backbone"]["source"].startswith("/")  # no absolute path of this machine


def test_a_trained_adapter_loads_as_trained_without_a_warning(mean_run, tiny_folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedAdapterWarning)
        model = genembed.load(tiny_folder, adapter=mean_run)
        assert (model.method, model.pooling, model.trained_for.method) == ("mean", "mean", "mean")
        got = model.encode(TEXTS)
        # the run folder is a saved model too: its backbone found again by its relative path
        whole = genembed.load(mean_run)
        assert whole.method == "mean" and whole.adapter == "run"
        np.testing.assert_allclose(whole.encode(TEXTS), got, atol=1e-5)
    forced = genembed.load(tiny_folder, adapter=mean_run, method="gircse")  # the caller's setting wins
    assert forced.method == "gircse"
    with pytest.warns(UntrainedAdapterWarning, match="trained for method='mean'"):
        forced.encode(TEXTS, steps=1)
    np.testing.assert_allclose(forced.encode(TEXTS, method="mean"), got, atol=1e-5)


def test_eval_and_serve_embed_with_the_trained_settings(mean_run, tiny_folder):
    from fastapi.testclient import TestClient

    from genembed.eval.encoders import GenembedEncoder
    from genembed.serve import ServeSettings, create_app

    model = genembed.load(tiny_folder, adapter=mean_run)
    assert GenembedEncoder(model).embed_settings.method == "mean"
    with TestClient(create_app(model, ServeSettings())) as client:
        response = client.post("/v1/embeddings", json={"input": TEXTS})
        assert client.get("/info").json()["method"] == "mean"
    served = np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)
    np.testing.assert_allclose(served, model.encode(TEXTS), atol=1e-5)


def test_an_adapter_written_before_the_settings_file_loads_as_before(mean_run, tiny_folder, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(mean_run, old, ignore=shutil.ignore_patterns(SETTINGS_FILE, "checkpoints"))
    assert (old / TRAIN_CONFIG).is_file()
    model = genembed.load(tiny_folder, adapter=old)
    assert model.method == "gircse"  # the package default, as before
    with pytest.warns(UntrainedAdapterWarning, match="trained for method='mean'"):
        model.encode(TEXTS, steps=1)


def test_an_exported_checkpoint_carries_the_settings_too(mean_run, tmp_path):
    from genembed.training.export import export_checkpoint

    out = export_checkpoint(mean_run, tmp_path / "exported")
    assert json.loads((out / SETTINGS_FILE).read_text())["encode"]["method"] == "mean"
