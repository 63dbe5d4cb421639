from __future__ import annotations

import dataclasses

import pytest

from genembed.encoders.instructions import DEFAULT_QUERY_INSTRUCTION
from genembed.encoders.settings import (
    EMBEDDING_FIELDS,
    CallSettings,
    EmbedSettings,
    IndexEmbedSettings,
    OutputSettings,
    RunOptions,
)


def test_method_defaults_are_filled_in_when_made():
    assert (EmbedSettings().attention, EmbedSettings().prompt_format) == ("causal", "chat")
    grit = EmbedSettings(method="grit", prompt_format="")
    assert (grit.attention, grit.prompt_format) == ("bidirectional", "plain")
    assert EmbedSettings(method="last", attention="bidirectional").attention == "bidirectional"
    auto = EmbedSettings.build(steps="auto", max_steps=7)
    assert auto.adaptive and auto.steps == 7 and not EmbedSettings.build(steps=3).adaptive


@pytest.mark.parametrize(
    ("cls", "fields", "message"),
    [
        (EmbedSettings, {"method": "grit", "attention": "causal"}, "method 'grit' always uses bidirectional attention"),
        (EmbedSettings, {"prompt_format": "xml"}, "prompt_format must be one of"),
        (EmbedSettings, {"steps": 0}, "steps must be a positive int or 'auto', got 0"),
        (EmbedSettings, {"steps": True}, "steps must be a positive int"),
        (EmbedSettings, {"stop_tol": 1.0}, r"stop_tol must be in \(0, 1\)"),
        (EmbedSettings, {"max_length": 0}, "max_length must be >= 1, got 0"),
        (EmbedSettings, {"tau": 0.0}, "tau must be > 0"),
        (RunOptions, {"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        (RunOptions, {"batch_tokens": -1}, "batch_tokens must be an int >= 0, got -1"),
        (OutputSettings, {"truncate_dim": 0}, "truncate_dim must be a positive int or None, got 0"),
        (OutputSettings, {"precision": "int4"}, "precision must be one of"),
        (OutputSettings, {"normalize": 1}, "normalize must be True or False, got 1"),
        (IndexEmbedSettings, {"truncate_dim": -3}, "truncate_dim must be a positive int or None"),
    ],
)
def test_bad_settings_are_refused(cls, fields, message):
    with pytest.raises(ValueError, match=message):
        cls(**fields)


def test_one_settings_object_per_concern():
    """What decides a vector is EmbedSettings, all of it (the fields centers are memoised under, unchanged);
    the speed switches and the index fields are other objects."""
    assert EMBEDDING_FIELDS == (
        "method",
        "steps",
        "adaptive",
        "stop_tol",
        "attention",
        "prompt_format",
        "tau",
        "max_length",
        "use_cache",
    )
    assert tuple(f.name for f in dataclasses.fields(EmbedSettings)) == EMBEDDING_FIELDS
    run = {f.name for f in dataclasses.fields(RunOptions)}
    index = {f.name for f in dataclasses.fields(IndexEmbedSettings)} - {"embed"}
    assert run == {"batch_size", "batch_tokens", "fast_path", "share_prefix", "cache_prefix"}
    assert index == {"query_instruction", "doc_instruction", "center", "truncate_dim"}
    assert not (run | index) & set(EMBEDDING_FIELDS)


def test_share_prefix_is_checked_against_the_embedding_settings():
    RunOptions(share_prefix=True).check(EmbedSettings(steps=2))
    for fields in ({"method": "mean"}, {"attention": "bidirectional"}, {"use_cache": False}):
        with pytest.raises(ValueError, match="share_prefix needs a soft-token method"):
            RunOptions(share_prefix=True).check(EmbedSettings(**fields))


def test_index_manifest_keys_round_trip_and_older_manifests_load():
    embed = EmbedSettings(method="mean", steps=3, max_length=300)
    settings = IndexEmbedSettings(embed=embed, doc_instruction="Doc:", center=True)
    stored = settings.to_dict()
    assert stored == {
        "method": "mean",
        "steps": 3,
        "attention": "causal",
        "prompt_format": "",  # the method's own, as older manifests wrote it
        "tau": 1.0,
        "max_length": 300,
        "query_instruction": DEFAULT_QUERY_INSTRUCTION,
        "doc_instruction": "Doc:",
        "center": True,
    }
    assert IndexEmbedSettings.from_dict(stored) == settings
    # a grit manifest written through the Python API held the unused default attention
    old_grit = IndexEmbedSettings.from_dict({"method": "grit", "attention": "causal", "prompt_format": "", "extra": 1})
    assert old_grit.attention == "bidirectional" and old_grit.prompt_format == "plain"  # read through .embed
    assert settings.instruction("doc") == "Doc:" and settings.instruction("query") == DEFAULT_QUERY_INSTRUCTION
    with pytest.raises(ValueError, match="kind must be 'query' or 'doc'"):
        settings.instruction("passage")
    changed = settings.replace(max_length=64, center=False, truncate_dim=None)
    assert changed.embed == embed.replace(max_length=64)
    assert changed.center is False and changed.doc_instruction == "Doc:"


def test_a_calls_settings_go_each_to_its_object_and_are_checked_together():
    own = {"method": "gircse", "steps": 4, "max_length": 100}
    changes = {"steps": 2, "batch_size": 3, "fast_path": False, "truncate_dim": 8, "precision": "int8", "center": None}
    call = CallSettings.build(own, OutputSettings(center=True), changes)
    assert call.embed == EmbedSettings(steps=2, max_length=100)
    assert call.run == RunOptions(batch_size=3, fast_path=False)
    assert call.output == OutputSettings(center=True, truncate_dim=8, precision="int8")
    given = CallSettings.build(EmbedSettings(method="mean"), OutputSettings(), {"max_length": 50})
    assert given.embed == EmbedSettings(method="mean", max_length=50) and given.run == RunOptions()
    index = IndexEmbedSettings(embed=EmbedSettings(method="mean"), center=True)  # encode(settings=index.settings)
    assert CallSettings.build(index, OutputSettings(), {}).embed == EmbedSettings(method="mean")
    with pytest.raises(ValueError, match="share_prefix needs a soft-token method"):
        CallSettings.build({"method": "mean"}, OutputSettings(), {"share_prefix": True})
    with pytest.raises(ValueError, match="precision must be one of"):
        CallSettings.build(own, OutputSettings(), {"precision": "float8"})


def test_the_former_speed_and_index_keywords_work_for_one_release_and_name_their_new_home():
    with pytest.deprecated_call(match=r"EmbedSettings.batch_size is deprecated: it is .*RunOptions.batch_size"):
        legacy = EmbedSettings(steps=2, batch_size=4, fast_path=False)
    with pytest.deprecated_call(match=r"EmbedSettings.center is deprecated: it is .*IndexEmbedSettings.center"):
        legacy_index = EmbedSettings.build(steps=2, center=True, doc_instruction="Doc:")
    assert legacy == EmbedSettings(steps=2)  # what decides the vectors
    assert RunOptions.of(legacy) == RunOptions(batch_size=4, fast_path=False)
    assert RunOptions.of(legacy.replace(max_length=64)).batch_size == 4  # kept by a copy
    assert IndexEmbedSettings.of(legacy_index) == IndexEmbedSettings(
        embed=EmbedSettings(steps=2), center=True, doc_instruction="Doc:"
    )
    with pytest.deprecated_call(match="RunOptions.batch_size"):
        assert legacy.batch_size == 4
    with pytest.deprecated_call(match="IndexEmbedSettings.truncate_dim"):
        assert legacy.truncate_dim is None
    with pytest.deprecated_call(match="IndexEmbedSettings"):
        assert legacy_index.to_dict() == IndexEmbedSettings.of(legacy_index).to_dict()
    with pytest.deprecated_call(match="IndexEmbedSettings.from_dict"):
        assert EmbedSettings.from_dict({"method": "mean", "steps": 3}) == EmbedSettings(method="mean", steps=3)
    with pytest.raises(ValueError, match="share_prefix needs"), pytest.deprecated_call():
        EmbedSettings(method="mean", share_prefix=True)  # checked as before
    with pytest.raises(ValueError, match="batch_size must be"), pytest.deprecated_call():
        EmbedSettings(batch_size=0)
