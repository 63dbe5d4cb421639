"""One assembly for every way a model is found, with one centring rule."""

from __future__ import annotations

import pytest

import genembed
from genembed.models import assemble as assembly
from genembed.models import load as loading
from genembed.models.assemble import centering


@pytest.mark.parametrize(
    ("asked", "saved", "published", "stored", "shipped", "expected"),
    [
        (True, False, True, 0, False, True),  # the caller wins over everything
        (False, True, False, 9, True, False),
        (None, True, False, 0, False, True),  # a saved model: as saved
        (None, False, False, 9, True, False),
        (None, None, True, 9, False, False),  # a published checkpoint: its authors' (uncentered)
        (None, None, False, 0, True, True),  # a shipped adapter
        (None, None, False, 3, False, True),  # an adapter that stores centers
        (None, None, False, 0, False, False),  # anything else
    ],
)
def test_the_centring_rule(asked, saved, published, stored, shipped, expected):
    assert centering(asked, saved=saved, published=published, stored=stored, shipped=shipped) is expected


def _spy(monkeypatch) -> list[dict]:
    calls = []
    real = assembly.assemble

    def spy(backbone, **kwargs):
        calls.append(kwargs)
        return real(backbone, **kwargs)

    monkeypatch.setattr(loading, "assemble", spy)
    return calls


def test_every_loading_path_assembles_through_one_function(tiny_folder, tmp_path, monkeypatch, fake_hub):
    calls = _spy(monkeypatch)
    local = genembed.load(tiny_folder)  # a local HF folder
    saved = local.save(tmp_path / "saved")
    genembed.load(saved)  # a saved folder
    fake_hub("org/tiny", tiny_folder)
    genembed.load("org/tiny")  # a hub id
    fake_hub("org/saved", saved)
    genembed.load("org/saved")  # a saved model from the hub
    real = loading.load_backbone
    monkeypatch.setattr(loading, "load_backbone", lambda model, **kw: real(model or tiny_folder, **kw))
    genembed.load(adapter=False)  # the bundled default
    assert len(calls) == 5
    assert [call.get("saved") is not None for call in calls] == [False, True, False, True, False]


def test_a_published_checkpoint_assembles_through_it_too(published_gircse, monkeypatch):
    calls = _spy(monkeypatch)
    model = genembed.load("Roytsai27/GIRCSE-Mistral7B")
    assert len(calls) == 1 and calls[0]["published"] is True and model.center is False
