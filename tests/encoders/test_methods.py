from __future__ import annotations

import pytest

from genembed.encoders.methods import DEFAULT_METHOD, METHOD_RULES, METHODS, SOFT_TOKEN_METHOD, method_rules


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
