"""encode's keywords: sentence-transformers' spellings, genembed's aliases and setting overrides, split in
one place."""

from __future__ import annotations

import pytest

from genembed.encoders.encode_options import ALIASES, SETTING_OVERRIDES, split_overrides
from genembed.encoders.settings import EmbedSettings, RunOptions


def test_aliases_fold_into_the_sentence_transformers_keywords_and_settings_come_apart():
    keywords, changes = split_overrides(
        {"instruction": "Find it.", "normalize": False, "steps": 3, "method": None, "center": True},
        prompt=None,
        normalize_embeddings=None,
    )
    assert keywords == {"prompt": "Find it.", "normalize_embeddings": False}
    assert changes == {"steps": 3, "center": True}  # None: the model's own


@pytest.mark.parametrize(("alias", "value", "other"), [("instruction", "a", "b"), ("normalize", True, False)])
def test_two_spellings_that_disagree_are_refused(alias, value, other):
    with pytest.raises(ValueError, match=f"{alias}=.* and {ALIASES[alias]}=.* disagree"):
        split_overrides({alias: value}, **{ALIASES[alias]: other})
    keywords, _ = split_overrides({alias: value}, **{ALIASES[alias]: value})  # agreeing is fine
    assert keywords[ALIASES[alias]] == value


def test_an_unknown_keyword_lists_what_encode_takes():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'checkpoint_chunk'"):
        split_overrides({"checkpoint_chunk": 4})


def test_the_overrides_are_encoding_settings_only():
    fields = set(EmbedSettings.__dataclass_fields__) | set(RunOptions.__dataclass_fields__) | {"center"}
    assert set(SETTING_OVERRIDES) - fields == {"max_steps"}  # steps="auto"'s cap
    assert "batch_size" not in SETTING_OVERRIDES  # a sentence-transformers keyword of its own
    assert not {"checkpoint_chunk", "query_instruction", "doc_instruction"} & set(SETTING_OVERRIDES)
