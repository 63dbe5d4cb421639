"""How texts become embeddings: the one settings type of encoding, training, indexes and the server.

An :class:`EmbedSettings` is checked when it is made, and the method's defaults are filled in then
(the attention and prompt format a method uses come from :mod:`genembed.encoders.methods`), so every
instance says exactly how it embeds. ``EmbedSettings.build(steps="auto")`` turns on adaptive steps.
Indexes store the fields that decide their embeddings in their manifest (:meth:`EmbedSettings.to_dict`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..backbone.attention import check_attention
from .defaults import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS, DEFAULT_MAX_LENGTH
from .instructions import DEFAULT_QUERY_INSTRUCTION
from .methods import DEFAULT_MAX_STEPS, DEFAULT_METHOD, DEFAULT_STEPS, DEFAULT_TAU, MethodRules, method_rules
from .prompts import PROMPT_FORMATS, EncodedPrompt, encode_prompts

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_MAX_LENGTH",
    "EMBEDDING_FIELDS",
    "EmbedSettings",
    "build_keywords",
    "check_given",
    "check_truncate_dim",
    "fields_for",
    "override_fields",
]

# What each field is for, marked on the field itself (``_field(default, *roles)``); every list of fields is
# read from these marks (:func:`fields_for`), none written out elsewhere:
# - "vector": decides an encoded text's embedding (not batch size, fast path or index-side settings): what
#   centers are memoised under and what a resumable ``genembed encode`` folder records (EMBEDDING_FIELDS);
# - "index": what an index manifest records (``embed``; older manifests hold these keys, truncate_dim only
#   when set);
# - "call": what one ``encode`` call may change (genembed.encoders.encode_options.SETTING_OVERRIDES);
# - "train": what a training run's YAML ``embedding:`` section holds (genembed.training.config).
_ROLES = ("vector", "index", "call", "train")


def _field(default: Any, *roles: str) -> Any:
    return dataclasses.field(default=default, metadata={"roles": roles})


@dataclass(frozen=True)
class EmbedSettings:
    """How texts become embeddings (see :meth:`genembed.GenerativeEmbedder.encode`).

    Raises:
        ValueError: an unknown method, attention or prompt format, or a value out of range.
    """

    # a name in genembed.encoders.methods.METHODS
    method: str = _field(DEFAULT_METHOD, "vector", "index", "call", "train")
    # K soft tokens (soft-token methods); with ``adaptive`` the cap
    steps: int = _field(DEFAULT_STEPS, "vector", "index", "call", "train")
    adaptive: bool = _field(False, "vector")  # stop each text when cos(z_k, z_{k-1}) > stop_tol
    stop_tol: float = _field(0.999, "vector", "call")
    # None: the method's (causal unless the method fixes it)
    attention: str | None = _field(None, "vector", "index", "call", "train")
    # one of PROMPT_FORMATS (chat, plain, gircse, gritlm); None or "": the method's
    prompt_format: str | None = _field(None, "vector", "index", "call", "train")
    tau: float = _field(DEFAULT_TAU, "vector", "index", "call", "train")  # soft-token softmax temperature
    # tokens per prompt (instruction and template included); longer texts are cut
    max_length: int = _field(DEFAULT_MAX_LENGTH, "vector", "index", "call")
    batch_size: int = _field(DEFAULT_BATCH_SIZE)  # texts per forward pass (changes no embedding)
    # short texts fill a batch past batch_size while rows x padded tokens fit (0: batch_size texts per batch)
    batch_tokens: int = _field(DEFAULT_BATCH_TOKENS, "call")
    # KV-cached soft tokens; False recomputes the sequence every step (reference)
    use_cache: bool = _field(True, "vector", "call", "train")
    # the CPU inference fast path where it applies (genembed.encoders.fast_decoder)
    fast_path: bool = _field(True, "call")
    # soft tokens on the transformers path: each instruction's prefix computed once per batch (same
    # embeddings up to rounding; genembed.encoders.shared_prefix); causal attention only
    share_prefix: bool = _field(False, "call", "train")
    # inference (no gradients), causal attention: each prefix's states (template and instruction before the
    # text) computed once and kept in the model's bounded cache (same embeddings up to rounding;
    # genembed.encoders.prefix_cache); False runs every prompt whole
    cache_prefix: bool = _field(True, "call")
    query_instruction: str = _field(DEFAULT_QUERY_INSTRUCTION, "index")  # indexes: the instruction queries get
    doc_instruction: str = _field("", "index")  # indexes: the instruction documents get
    center: bool = _field(False, "index")  # indexes: subtract each instruction's center (genembed.encoders.centering)
    truncate_dim: int | None = _field(None, "index")  # indexes: keep the first truncate_dim dimensions (None: all)

    def __post_init__(self) -> None:
        rules = method_rules(self.method)
        attention = rules.check_attention(self.attention)
        check_attention(attention)
        prompt_format = self.prompt_format or rules.prompt_format
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
        steps = self.steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive int or 'auto', got {steps!r}")
        if not 0.0 < self.stop_tol < 1.0:
            raise ValueError(f"stop_tol must be in (0, 1), got {self.stop_tol}")
        if self.max_length < 1 or self.batch_size < 1:
            raise ValueError(f"max_length and batch_size must be >= 1, got {self.max_length} and {self.batch_size}")
        if isinstance(self.batch_tokens, bool) or not isinstance(self.batch_tokens, int) or self.batch_tokens < 0:
            raise ValueError(f"batch_tokens must be an int >= 0, got {self.batch_tokens!r}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if self.share_prefix and (not rules.uses_steps or attention != "causal" or not self.use_cache):
            raise ValueError(
                "share_prefix needs a soft-token method (gircse), causal attention and use_cache=True, "
                f"got method {self.method!r}, attention {attention!r}, use_cache {self.use_cache}"
            )
        check_truncate_dim(self.truncate_dim)
        object.__setattr__(self, "attention", attention)
        object.__setattr__(self, "prompt_format", prompt_format)

    @classmethod
    def build(
        cls, *, steps: int | str = DEFAULT_STEPS, max_steps: int = DEFAULT_MAX_STEPS, **fields: Any
    ) -> EmbedSettings:
        """Settings with ``steps`` a number or ``"auto"`` (adaptive, at most ``max_steps``)."""
        if steps == "auto":
            return cls(steps=max_steps, adaptive=True, **fields)
        return cls(steps=steps, **fields)  # type: ignore[arg-type]

    def override(self, **changes: Any) -> EmbedSettings:
        """These settings with ``changes`` (:func:`override_fields`: None keeps a field, another method
        brings its own attention and prompt format, ``steps="auto"`` is adaptive), checked again."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("steps", "adaptive")}
        own |= {"steps": "auto", "max_steps": self.steps} if self.adaptive else {"steps": self.steps}
        return EmbedSettings.build(**override_fields(own, changes))

    def replace(self, **changes: Any) -> EmbedSettings:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def rules(self) -> MethodRules:
        """The method's :class:`~genembed.encoders.methods.MethodRules`."""
        return method_rules(self.method)

    def instruction(self, kind: str) -> str:
        """The instruction of a ``"query"`` or a ``"doc"`` (indexes)."""
        if kind not in ("query", "doc"):
            raise ValueError(f"kind must be 'query' or 'doc', got {kind!r}")
        return self.query_instruction if kind == "query" else self.doc_instruction

    def tokenize(self, tokenizer: Any, texts: list[str], instruction: str) -> list[EncodedPrompt]:
        """The texts' prompts in this prompt format, tokenized and cut to ``max_length`` (:func:`encode_prompts`)."""
        return encode_prompts(
            tokenizer,
            texts,
            instruction=instruction,
            prompt_format=self.prompt_format,  # type: ignore[arg-type]
            max_length=self.max_length,
        )

    def prompt_ids(self, tokenizer: Any, texts: list[str], kind: str) -> list[list[int]]:
        """Token ids of each text's embedding prompt: the segment it contributes to a RAG context."""
        return [p.ids for p in self.tokenize(tokenizer, texts, self.instruction(kind))]

    def prompts(self, tokenizer: Any, texts: list[str], instruction: str) -> list[EncodedPrompt]:
        """The former name of :meth:`tokenize` (a model's ``prompts`` are its named instructions)."""
        return self.tokenize(tokenizer, texts, instruction)

    def to_dict(self) -> dict[str, Any]:
        """The fields an index manifest records (a method's own prompt format is written as ``""``;
        ``truncate_dim`` only when set, so an index of whole vectors writes what older ones hold)."""
        out = {name: getattr(self, name) for name in fields_for("index")}
        if out["prompt_format"] == self.rules.prompt_format:
            out["prompt_format"] = ""
        if out["truncate_dim"] is None:
            del out["truncate_dim"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbedSettings:
        """Settings from :meth:`to_dict` (unknown keys ignored; a fixed attention is the method's)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if method_rules(known.get("method", DEFAULT_METHOD)).fixed_attention:
            known.pop("attention", None)  # older manifests may hold the unused default, causal
        return cls(**known)


def fields_for(role: str) -> tuple[str, ...]:
    """The :class:`EmbedSettings` fields marked with ``role`` (one of ``"vector"``, ``"index"``, ``"call"``,
    ``"train"``; see the comment above the class), in their order."""
    if role not in _ROLES:
        raise ValueError(f"role must be one of {_ROLES}, got {role!r}")
    return tuple(f.name for f in dataclasses.fields(EmbedSettings) if role in f.metadata["roles"])


def build_keywords() -> tuple[str, ...]:
    """The keywords :meth:`EmbedSettings.build` takes besides the fields (``max_steps``)."""
    import inspect

    names = inspect.signature(EmbedSettings.build).parameters
    return tuple(n for n in names if n not in EmbedSettings.__dataclass_fields__ and n not in ("cls", "fields"))


# the fields that decide an encoded text's embedding: what centers are memoised under
EMBEDDING_FIELDS = fields_for("vector")


def override_fields(own: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``own`` settings (a model's, a saved model's or a published checkpoint's) with ``changes`` made: the
    one rule of how a call's settings replace a model's.

    A change of None keeps the field (and so does ``prompt_format=""``: the method's own format, as an
    index manifest writes it). A change of method drops ``own`` attention and prompt format: they belong
    to its method, and the new one brings its own unless ``changes`` name them too.
    """
    fields = dict(own)
    method = changes.get("method")
    if method is not None and method != fields.get("method", DEFAULT_METHOD):
        fields.pop("attention", None)
        fields.pop("prompt_format", None)
    for key, value in changes.items():
        if value is not None and not (key == "prompt_format" and value == ""):
            fields[key] = value
    return fields


def check_truncate_dim(truncate_dim: Any) -> int | None:
    """``truncate_dim`` when it is a positive int or None; ValueError otherwise."""
    if truncate_dim is not None and (
        isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1
    ):
        raise ValueError(f"truncate_dim must be a positive int or None, got {truncate_dim!r}")
    return truncate_dim


def check_given(**given: Any) -> None:
    """Check settings given by name (None: not given) before anything loads, each against the defaults of
    the others: an unknown method, attention or prompt format, ``steps`` < 1, ``tau`` <= 0 or
    ``max_length`` < 1 fails here, the message naming the setting and the valid choices.

    Raises:
        ValueError: a bad setting.
    """
    EmbedSettings.build(**{key: value for key, value in given.items() if value is not None})
