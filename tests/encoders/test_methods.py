from __future__ import annotations

import dataclasses
from unittest.mock import patch

import pytest

from genembed.encoders import core
from genembed.encoders.batching import collate
from genembed.encoders.core import embed_prepared
from genembed.encoders.methods import (
    DEFAULT_METHOD,
    METHOD_RULES,
    METHODS,
    POOLINGS,
    SOFT_TOKEN_METHOD,
    MethodRules,
    method_rules,
)
from genembed.encoders.prompts import tokenize
from genembed.encoders.settings import EmbedSettings


def test_the_table_holds_every_method_and_its_rules():
    assert METHODS == ("gircse", "mean", "last", "grit") and DEFAULT_METHOD == SOFT_TOKEN_METHOD == "gircse"
    gircse, grit = METHOD_RULES["gircse"], METHOD_RULES["grit"]
    assert gircse.uses_steps and gircse.steps(7) == 7 and gircse.loss == "icr" and gircse.prompt_format == "chat"
    assert not grit.uses_steps and grit.steps(7) == 1 and grit.loss == "info_nce" and grit.prompt_format == "plain"
    assert METHOD_RULES["last"].pooling == "last" and METHOD_RULES["mean"].pooling == grit.pooling == "mean"


def test_fixed_attention_is_kept_or_refused():
    grit, mean = method_rules("grit"), method_rules("mean")
    assert grit.attention("causal") == grit.attention(None) == "bidirectional"
    assert grit.check_attention(None) == grit.check_attention("bidirectional") == "bidirectional"
    with pytest.raises(ValueError, match="method 'grit' always uses bidirectional attention"):
        grit.check_attention("causal")
    assert mean.attention(None) == "causal" and mean.check_attention("bidirectional") == "bidirectional"


def test_an_unknown_method_names_the_known_ones():
    with pytest.raises(ValueError, match=r"method must be one of \('gircse', 'mean', 'last', 'grit'\), got 'bert'"):
        method_rules("bert")


def test_an_unknown_pooling_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"pooling must be one of \('soft_tokens', 'mean', 'last'\), got 'max'"):
        MethodRules("maxpool", pooling="max", prompt_format="plain", fixed_attention=None, loss="info_nce")


def test_the_core_pools_every_single_pass_pooling(tiny):
    # every pooling a method may name runs in embed_prepared: a new name cannot fall back to another
    assert set(POOLINGS) == {"soft_tokens", *core._SINGLE_PASS_POOLING}
    settings = EmbedSettings(method="last", max_length=32)
    batch = collate(tokenize(tiny.tokenizer, ["a b c", "d"], "", settings), pad_id=tiny.tokenizer.pad_token_id)
    assert embed_prepared(tiny.model, batch, settings).steps.shape[:2] == (2, 1)
    odd = dataclasses.replace(METHOD_RULES["last"], name="odd")
    object.__setattr__(odd, "pooling", "max")  # past the table's own check, as a hand-made rules object could be
    with (
        patch.object(core, "method_rules", lambda method: odd),
        pytest.raises(ValueError, match=r"single-pass pooling must be one of \('mean', 'last'\), got 'max'"),
    ):
        embed_prepared(tiny.model, batch, settings)


def test_pooling_names_a_method_and_must_agree_with_one_given():
    from genembed.encoders.methods import method_for_pooling

    assert [method_for_pooling(p) for p in ("soft_tokens", "mean", "last")] == ["gircse", "mean", "last"]
    assert method_for_pooling(None, "grit") == "grit" and method_for_pooling("mean", "grit") == "grit"
    with pytest.raises(ValueError, match=r"pooling must be one of"):
        method_for_pooling("cls")
    with pytest.raises(ValueError, match=r"method 'last' pools by 'last', not 'mean'"):
        method_for_pooling("mean", "last")
