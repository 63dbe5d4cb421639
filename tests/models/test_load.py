"""Settings on ``genembed.load`` and ``model.save``: the names ``genembed.json`` stores, checked at the call,
written as the model holds them, refused before anything is written when invalid."""

from __future__ import annotations

import json

import numpy as np
import pytest

import genembed
from genembed.models import load as loading

TEXTS = ["the cat sat on the mat", "stock markets fell sharply " * 20]


def test_load_takes_settings_and_save_round_trips_them(tiny_folder, tmp_path):
    model = genembed.load(tiny_folder, method="mean", steps=3, tau=0.5, max_length=24, attention="bidirectional")
    assert (model.method, model.steps, model.tau, model.max_length, model.attention) == (
        "mean",
        3,
        0.5,
        24,
        "bidirectional",
    )
    assert model.pooling == "mean" and model.embed_settings().max_length == 24
    folder = model.save(tmp_path / "saved")
    encode = json.loads((folder / "genembed.json").read_text())["encode"]
    assert encode["method"] == "mean" and encode["steps"] == 3 and encode["max_length"] == 24
    again = genembed.load(folder)
    assert (again.method, again.steps, again.tau, again.max_length, again.attention) == (
        "mean",
        3,
        0.5,
        24,
        "bidirectional",
    )
    np.testing.assert_array_equal(again.encode(TEXTS), model.encode(TEXTS))
    # the model's max_length is what encode cuts at; a call may still say otherwise
    np.testing.assert_array_equal(
        model.encode(TEXTS),
        genembed.load(tiny_folder, method="mean").encode(
            TEXTS, max_length=24, steps=3, tau=0.5, attention="bidirectional"
        ),
    )
    assert not np.allclose(model.encode(TEXTS)[1], model.encode(TEXTS, max_length=64)[1])


def test_pooling_names_the_method(tiny_folder):
    assert genembed.load(tiny_folder, pooling="last").method == "last"
    assert genembed.load(tiny_folder, pooling="soft_tokens").method == "gircse"
    assert genembed.load(tiny_folder, pooling="mean", method="mean").method == "mean"
    with pytest.raises(ValueError, match=r"method 'gircse' pools by 'soft_tokens', not 'mean'"):
        genembed.load(tiny_folder, pooling="mean", method="gircse")


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"method": "bogus"}, r"method must be one of \('gircse', 'mean', 'last', 'grit'\), got 'bogus'"),
        ({"steps": 0}, r"steps must be a positive int or 'auto', got 0"),
        ({"tau": 0}, r"tau must be > 0"),
        ({"attention": "sideways"}, r"attention"),
        ({"prompt_format": "fancy"}, r"prompt_format must be one of"),
        ({"max_length": 0}, r"max_length must be >= 1, got 0"),
        ({"pooling": "max"}, r"pooling must be one of \('soft_tokens', 'mean', 'last'\), got 'max'"),
        ({"method": "grit", "attention": "causal"}, r"method 'grit' always uses bidirectional attention"),
        ({"center": "yes"}, r"center must be True, False or None"),
    ],
)
def test_an_invalid_setting_is_refused_at_the_call_before_anything_loads(tiny_folder, monkeypatch, settings, match):
    def never(*args, **kwargs):
        raise AssertionError("a backbone was loaded")

    monkeypatch.setattr(loading, "load_backbone", never)
    monkeypatch.setattr(loading, "resolve_source", never)
    with pytest.raises(ValueError, match=match):
        genembed.load(tiny_folder, **settings)


def test_the_callers_method_brings_its_own_attention_and_prompt_format_over_a_saved_models(tiny_folder, tmp_path):
    model = genembed.load(tiny_folder, method="mean", prompt_format="gritlm", attention="bidirectional")
    folder = model.save(tmp_path / "saved")
    same = genembed.load(folder, steps=2)  # the saved method: its saved attention and format stay
    assert (same.method, same.prompt_format, same.attention, same.steps) == ("mean", "gritlm", "bidirectional", 2)
    other = genembed.load(folder, method="gircse")
    assert (other.method, other.prompt_format, other.attention) == ("gircse", None, None)
    assert other.embed_settings().prompt_format == "chat"


@pytest.mark.parametrize(
    ("attribute", "value", "match"),
    [
        ("method", "bogus", r"method must be one of"),
        ("steps", 0, r"steps must be a positive int"),
        ("center", "yes", r"center must be True or False"),
        ("max_length", 0, r"max_length must be >= 1, got 0"),
        ("truncate_dim", -1, r"truncate_dim must be a positive int"),
        ("default_prompt_name", "nowhere", r"default_prompt_name 'nowhere' is not in this model's prompts"),
    ],
)
def test_an_invalid_setting_is_refused_when_set(tiny_model, tmp_path, attribute, value, match):
    before = tiny_model.settings
    with pytest.raises(ValueError, match=match):
        tiny_model.with_settings(**{attribute: value})
    with pytest.raises(ValueError, match=match):
        setattr(tiny_model, attribute, value)  # the former way (deprecated) checks too
    assert tiny_model.settings is before  # nothing changed
    assert genembed.load(tiny_model.save(tmp_path / "new")).settings == before


def test_a_refused_save_leaves_an_earlier_save_as_it_was(tiny_model, tmp_path):
    tiny_model.settings = tiny_model.settings.replace(default_prompt_name="query")
    folder = tiny_model.save(tmp_path / "saved")
    before = (folder / "genembed.json").read_text()
    del tiny_model.prompts["query"]  # the named instructions changed in place: checked when saving
    with pytest.raises(ValueError, match="default_prompt_name 'query' is not in this model's prompts"):
        tiny_model.save(folder)
    assert (folder / "genembed.json").read_text() == before
    last = tiny_model.with_settings(method="last", default_prompt_name=None)
    assert genembed.load(last.save(folder)).method == "last"


def test_a_format_1_save_without_max_length_still_loads(tiny_model, tmp_path):
    folder = tiny_model.save(tmp_path / "saved")
    path = folder / "genembed.json"
    settings = json.loads(path.read_text())
    del settings["encode"]["max_length"]
    path.write_text(json.dumps({**settings, "format": 1}))
    assert genembed.load(folder).max_length == 512
    path.write_text(json.dumps({**settings, "format": 3}))
    with pytest.raises(ValueError, match=r"format 3 is not one of \(1, 2\)"):
        genembed.load(folder)


def test_the_encode_command_and_eval_keep_a_saved_max_length(tiny_folder, tmp_path):
    from typer.testing import CliRunner

    from genembed.cli.app import app
    from genembed.encoders.corpus import load_corpus_embeddings
    from genembed.eval import GenembedEncoder

    model = genembed.load(tiny_folder, max_length=40)
    folder = model.save(tmp_path / "saved")
    assert GenembedEncoder(model).embed_settings.max_length == 40
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    result = CliRunner().invoke(
        app, ["encode", str(source), "--out", str(tmp_path / "emb"), "--model", str(folder), "-q"]
    )
    assert result.exit_code == 0, result.output
    _, vectors = load_corpus_embeddings(tmp_path / "emb")
    np.testing.assert_allclose(vectors, model.encode(TEXTS), atol=1e-5)
    assert not np.allclose(vectors[1], model.encode(TEXTS, max_length=96)[1], atol=1e-3)  # the cut matters
