"""What ``model.encode`` takes besides sentence-transformers' keywords, looked up in one place.

``encode`` spells its keywords as sentence-transformers does (``prompt``, ``prompt_name``, ``batch_size``,
``normalize_embeddings``, ``convert_to_numpy``, ``precision``, ``truncate_dim``, ...). The others are
overrides of the model's settings (:class:`~genembed.encoders.settings.EmbedSettings` fields such as
``steps`` or ``method``, :class:`~genembed.encoders.settings.RunOptions` speed switches such as
``batch_tokens``, and ``center``), given as keywords (:class:`EncodeOverrides`), or genembed's own
spelling of a sentence-transformers keyword (:data:`ALIASES`: ``instruction`` is ``prompt``,
``normalize`` is ``normalize_embeddings``), or ``tokenized`` (the texts' prompts already tokenized;
:data:`INPUTS`). The few that are none of these ``encode`` declares itself: ``settings`` (a whole settings
object) and the ``return_*`` switches.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, TypedDict

from .prompts import EncodedPrompt
from .settings import build_keywords, fields_for

__all__ = ["ALIASES", "INPUTS", "SETTING_OVERRIDES", "EncodeOverrides", "split_overrides"]

# genembed's name -> sentence-transformers' name of the same keyword (both spellings work; given both, they
# must agree)
ALIASES = {"instruction": "prompt", "normalize": "normalize_embeddings"}

# what encode takes besides the texts and settings: their prompts already tokenized (``prompts``, its former
# name, is deprecated: a model's ``prompts`` are its named instructions)
INPUTS = ("tokenized",)
_FORMER = {"prompts": "tokenized"}

# the settings one encode call may change: the EmbedSettings and RunOptions fields marked "call", the
# keywords EmbedSettings.build takes besides them (``max_steps`` of steps="auto") and the output
# settings' ``center`` (their other fields are encode's own keywords); training-only and index-only
# fields are not among them
SETTING_OVERRIDES = (*fields_for("call"), *build_keywords(), "center")


class EncodeOverrides(TypedDict, total=False):
    """The keywords of :data:`ALIASES`, :data:`INPUTS` and :data:`SETTING_OVERRIDES` (None or absent: the
    model's own)."""

    instruction: str | None  # = prompt
    tokenized: list[EncodedPrompt] | None  # the texts' prompts, already tokenized, one per text
    normalize: bool | None  # = normalize_embeddings
    method: str | None  # a name in genembed.encoders.methods.METHODS
    steps: int | str | None  # GIRCSE's K, or "auto" (adaptive, at most max_steps)
    attention: str | None  # causal | bidirectional
    prompt_format: str | None  # chat | plain | gircse | gritlm
    tau: float | None  # soft-token softmax temperature
    max_length: int | None  # tokens per prompt
    max_steps: int | None  # the cap of steps="auto"
    stop_tol: float | None  # steps="auto" stops a text when cos(z_k, z_{k-1}) > stop_tol
    use_cache: bool | None  # KV-cached soft tokens (False: the reference recomputation)
    fast_path: bool | None  # the CPU inference fast path where it applies
    share_prefix: bool | None  # each instruction's prefix computed once per batch
    cache_prefix: bool | None  # each instruction's prefix states computed once and cached (inference)
    batch_tokens: int | None  # short texts fill a batch past batch_size while padded tokens fit (0: off)
    center: bool | None  # subtract the instruction's center


def split_overrides(overrides: Mapping[str, Any], **keywords: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(keywords, changes)``: sentence-transformers' ``keywords`` with the aliases in ``overrides`` folded
    in, and the setting changes ``overrides`` make (None values left out).

    Raises:
        TypeError: a keyword that is neither an alias nor a setting (the message lists them).
        ValueError: an alias and its sentence-transformers spelling given different values.
    """
    keywords = dict(keywords)
    changes = {}
    for name, value in overrides.items():
        if name in _FORMER:
            # stacklevel: this function, Encoding.encode, the model's encode (genembed._delegate), the caller
            warnings.warn(f"encode({name}=...) is deprecated: use {_FORMER[name]}=", DeprecationWarning, stacklevel=4)
            name = _FORMER[name]
        if name in INPUTS:
            keywords[name] = value
        elif name in ALIASES:
            other = ALIASES[name]
            if value is not None and keywords.get(other) is not None and keywords[other] != value:
                raise ValueError(f"{name}={value!r} and {other}={keywords[other]!r} disagree; give one of them")
            if value is not None:
                keywords[other] = value
        elif name in SETTING_OVERRIDES:
            if value is not None:
                changes[name] = value
        else:
            raise TypeError(
                f"encode() got an unexpected keyword argument {name!r}; besides sentence-transformers' keywords it "
                f"takes the settings {list(SETTING_OVERRIDES)}, the spellings {list(ALIASES)} and {list(INPUTS)}"
            )
    return keywords, changes
