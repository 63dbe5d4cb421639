from __future__ import annotations

import pytest

from genembed.encoders.instructions import DEFAULT_QUERY_INSTRUCTION
from genembed.encoders.settings import EmbedSettings


def test_method_defaults_are_filled_in_when_made():
    assert (EmbedSettings().attention, EmbedSettings().prompt_format) == ("causal", "chat")
    grit = EmbedSettings(method="grit", prompt_format="")
    assert (grit.attention, grit.prompt_format) == ("bidirectional", "plain")
    assert EmbedSettings(method="last", attention="bidirectional").attention == "bidirectional"
    auto = EmbedSettings.build(steps="auto", max_steps=7)
    assert auto.adaptive and auto.steps == 7 and not EmbedSettings.build(steps=3).adaptive


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "grit", "attention": "causal"}, "method 'grit' always uses bidirectional attention"),
        ({"prompt_format": "xml"}, "prompt_format must be one of"),
        ({"steps": 0}, "steps must be a positive int or 'auto', got 0"),
        ({"steps": True}, "steps must be a positive int"),
        ({"stop_tol": 1.0}, r"stop_tol must be in \(0, 1\)"),
        ({"batch_size": 0}, "max_length and batch_size must be >= 1"),
        ({"tau": 0.0}, "tau must be > 0"),
    ],
)
def test_bad_settings_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        EmbedSettings(**fields)


def test_index_manifest_keys_round_trip_and_older_manifests_load():
    settings = EmbedSettings(method="mean", steps=3, max_length=300, doc_instruction="Doc:", center=True)
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
    assert EmbedSettings.from_dict(stored) == settings
    # a grit manifest written through the Python API held the unused default attention
    old_grit = EmbedSettings.from_dict({"method": "grit", "attention": "causal", "prompt_format": "", "extra": 1})
    assert old_grit.attention == "bidirectional" and old_grit.prompt_format == "plain"
    assert settings.instruction("doc") == "Doc:" and settings.instruction("query") == DEFAULT_QUERY_INSTRUCTION
    with pytest.raises(ValueError, match="kind must be 'query' or 'doc'"):
        settings.instruction("passage")
