"""One settings object per concern: the model's settings in one frozen dataclass (genembed.json is its
to_dict), and every list of settings fields read from the dataclasses, none written out by hand."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest

import genembed
from genembed.encoders.encode_options import ALIASES, INPUTS, SETTING_OVERRIDES, EncodeOverrides
from genembed.encoders.model_settings import ModelSettings
from genembed.encoders.output import OutputPipeline
from genembed.encoders.settings import (
    EMBEDDING_FIELDS,
    EmbedSettings,
    IndexEmbedSettings,
    OutputSettings,
    RunOptions,
    build_keywords,
    fields_for,
)

SRC = Path(genembed.__file__).parent
SETTINGS_TYPES = (EmbedSettings, RunOptions, IndexEmbedSettings, OutputSettings, ModelSettings)
FIELD_NAMES = {f.name for cls in SETTINGS_TYPES for f in dataclasses.fields(cls)}


def test_every_field_list_is_derived_from_the_dataclasses():
    from genembed.models import save
    from genembed.training.config import EmbeddingConfig

    assert fields_for("vector") == EMBEDDING_FIELDS
    assert "batch_size" not in EMBEDDING_FIELDS and "use_cache" in EMBEDDING_FIELDS
    assert tuple(IndexEmbedSettings().to_dict()) == tuple(n for n in fields_for("index") if n != "truncate_dim")
    assert set(fields_for("call")) <= set(EMBEDDING_FIELDS) | {f.name for f in dataclasses.fields(RunOptions)}
    assert (*fields_for("call"), *build_keywords(), "center") == SETTING_OVERRIDES and build_keywords() == (
        "max_steps",
    )
    assert set(typing.get_type_hints(EncodeOverrides)) == set(ALIASES) | set(INPUTS) | set(SETTING_OVERRIDES)
    assert ModelSettings.fields_in("encode") == save.ENCODE_KEYS
    assert (
        save.SAVED_EXTRAS == ModelSettings.fields_in(None) == ("prompts", "default_prompt_name", "similarity_fn_name")
    )
    yaml_keys = {f.name for f in dataclasses.fields(EmbeddingConfig)} - {"query_max_length", "doc_max_length"}
    assert yaml_keys == set(fields_for("train"))
    # the model's encode settings map onto EmbedSettings by name: the vector ones a call may change, and the
    # output pipeline's
    encode = set(ModelSettings.fields_in("encode"))
    output = {f.name for f in dataclasses.fields(OutputPipeline)}
    assert encode == (set(fields_for("call")) & encode) | (output & encode) == encode
    with pytest.raises(ValueError, match="role must be one of"):
        fields_for("speed")


def test_no_module_writes_a_list_of_settings_fields_by_hand():
    """A tuple, list or set of four or more strings, all of them settings fields, outside the dataclasses."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if len(names) >= 4 and len(names) == len(node.elts) and set(names) <= FIELD_NAMES:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_genembed_json_is_the_settings_to_dict(tiny_model, tmp_path):
    model = tiny_model.with_settings(method="mean", steps=3, truncate_dim=8, default_prompt_name="query")
    assert tiny_model.method == "gircse"  # with_settings made a new model over the same weights
    assert model.backbone is tiny_model.backbone
    saved = json.loads((model.save(tmp_path / "m") / "genembed.json").read_text())
    assert {key: saved[key] for key in model.settings.to_dict()} == model.settings.to_dict()
    assert ModelSettings.from_dict(saved) == model.settings
    assert genembed.load(tmp_path / "m").settings == model.settings


def test_settings_are_frozen_and_the_former_setters_warn(tiny_model):
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny_model.settings.method = "mean"
    with pytest.deprecated_call(match=r"use model.with_settings\(method=...\)"):
        tiny_model.method = "mean"
    assert tiny_model.settings.method == "mean" and tiny_model.embed_settings().method == "mean"
    with pytest.raises(TypeError, match="settings must be a ModelSettings"):
        tiny_model.settings = {"method": "mean"}
    with pytest.raises(TypeError, match="not both"):
        type(tiny_model)(tiny_model.backbone, settings=ModelSettings(), method="mean")
