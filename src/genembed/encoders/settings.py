"""How texts become embeddings: one frozen settings object per concern.

- :class:`EmbedSettings`: what decides a vector (method, steps, attention, prompt format, tau, prompt
  length, ...), all of it; what centers are memoised under (:data:`EMBEDDING_FIELDS`).
- :class:`RunOptions`: speed switches that change no embedding (batch size, token budget, the CPU fast
  path, the prefix caches), as transformers keeps its runtime arguments apart from a model's config.
- :class:`IndexEmbedSettings`: what an index records besides (its ``embed`` manifest section): the
  instructions of queries and documents, centring and ``truncate_dim``.
- :class:`OutputSettings`: the steps after the core one call asks for (centre, ``truncate_dim``,
  normalise, ``precision``), checked before any work and applied by
  :class:`~genembed.encoders.output.OutputPipeline` after the core.
- :class:`CallSettings`: the three a call of ``encode`` runs with, built (and so checked) together.

Each is checked when it is made; :class:`EmbedSettings` fills in its method's attention and prompt format
then (:mod:`genembed.encoders.methods`), so every instance says exactly how it embeds.
``EmbedSettings.build(steps="auto")`` turns on adaptive steps.

``EmbedSettings`` held the speed and index fields too; giving them to it still works for one release
and warns, naming their new home (:mod:`genembed.encoders._settings_compat`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from ..backbone.attention import check_attention
from ._settings_compat import carry, install, moved_values, warn_moved
from .defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_MAX_LENGTH,
    DEFAULT_MAX_STEPS,
    DEFAULT_METHOD,
    DEFAULT_STEPS,
    DEFAULT_STOP_TOL,
    DEFAULT_TAU,
)
from .instructions import DEFAULT_QUERY_INSTRUCTION
from .methods import MethodRules, method_rules
from .prompts import PROMPT_FORMATS, EncodedPrompt, tokenize
from .quantize import check_precision

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_MAX_LENGTH",
    "EMBEDDING_FIELDS",
    "CallSettings",
    "EmbedSettings",
    "IndexEmbedSettings",
    "OutputSettings",
    "RunOptions",
    "build_keywords",
    "check_given",
    "check_truncate_dim",
    "fields_for",
    "override_fields",
]

# What else a field is for, marked on the field itself (``_field(default, *roles)``); every list of
# fields is read from the dataclasses and these marks (:func:`fields_for`), none written out elsewhere:
# - "vector": every field of EmbedSettings (no mark needed): what decides an encoded text's embedding,
#   what centers are memoised under and what a resumable ``genembed encode`` folder records;
# - "index": what an index manifest records (its ``embed`` section; older manifests hold these keys,
#   truncate_dim only when set);
# - "call": what one ``encode`` call may change by keyword (genembed.encoders.encode_options.SETTING_OVERRIDES);
# - "train": what a training run's YAML ``embedding:`` section holds (genembed.training.config).
_ROLES = ("vector", "index", "call", "train")


def _field(default: Any, *roles: str, factory: Any = None) -> Any:
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"roles": roles})
    return dataclasses.field(default=default, metadata={"roles": roles})


def _replace_given(settings: Any, changes: Mapping[str, Any]) -> Any:
    """A copy of the dataclass ``settings`` with the ``changes`` that are not None (checked again)."""
    return dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class EmbedSettings:
    """What decides a vector: how texts become embeddings (see :meth:`genembed.GenerativeEmbedder.encode`).

    Raises:
        ValueError: an unknown method, attention or prompt format, or a value out of range.
    """

    # a name in genembed.encoders.methods.METHODS
    method: str = _field(DEFAULT_METHOD, "index", "call", "train")
    # K soft tokens (soft-token methods); with ``adaptive`` the cap
    steps: int = _field(DEFAULT_STEPS, "index", "call", "train")
    adaptive: bool = _field(False)  # stop each text when cos(z_k, z_{k-1}) > stop_tol
    stop_tol: float = _field(DEFAULT_STOP_TOL, "call")
    # None: the method's (causal unless the method fixes it)
    attention: str | None = _field(None, "index", "call", "train")
    # one of PROMPT_FORMATS (chat, plain, gircse, gritlm); None or "": the method's
    prompt_format: str | None = _field(None, "index", "call", "train")
    tau: float = _field(DEFAULT_TAU, "index", "call", "train")  # soft-token softmax temperature
    # tokens per prompt (instruction and template included); longer texts are cut
    max_length: int = _field(DEFAULT_MAX_LENGTH, "index", "call")
    # KV-cached soft tokens; False recomputes the sequence every step (reference; rounding differs)
    use_cache: bool = _field(True, "call", "train")

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
        if self.max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {self.max_length}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
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
        return carry(self, EmbedSettings.build(**override_fields(own, changes)))

    def replace(self, **changes: Any) -> EmbedSettings:
        """A copy with ``changes`` (checked again)."""
        return carry(self, dataclasses.replace(self, **changes))

    @property
    def rules(self) -> MethodRules:
        """The method's :class:`~genembed.encoders.methods.MethodRules`."""
        return method_rules(self.method)

    def tokenize(self, tokenizer: Any, texts: list[str], instruction: str) -> list[EncodedPrompt]:
        """The texts' prompts in this prompt format, tokenized and cut to ``max_length``
        (:func:`genembed.encoders.prompts.tokenize`, which every caller in genembed uses)."""
        return tokenize(tokenizer, texts, instruction, self)

    def prompts(self, tokenizer: Any, texts: list[str], instruction: str) -> list[EncodedPrompt]:
        """The former name of :meth:`tokenize` (a model's ``prompts`` are its named instructions)."""
        return self.tokenize(tokenizer, texts, instruction)

    # the index methods EmbedSettings held before (deprecated; genembed.encoders._settings_compat)

    def instruction(self, kind: str) -> str:
        """Deprecated: :meth:`IndexEmbedSettings.instruction`."""
        warn_moved("instruction", "IndexEmbedSettings.instruction")
        return IndexEmbedSettings.of(self).instruction(kind)

    def prompt_ids(self, tokenizer: Any, texts: list[str], kind: str) -> list[list[int]]:
        """Deprecated: :meth:`IndexEmbedSettings.prompt_ids`."""
        warn_moved("prompt_ids", "IndexEmbedSettings.prompt_ids")
        return IndexEmbedSettings.of(self).prompt_ids(tokenizer, texts, kind)

    def to_dict(self) -> dict[str, Any]:
        """Deprecated: :meth:`IndexEmbedSettings.to_dict` (an index manifest's ``embed`` section)."""
        warn_moved("to_dict", "IndexEmbedSettings.to_dict")
        return IndexEmbedSettings.of(self).to_dict()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbedSettings:
        """Deprecated: ``IndexEmbedSettings.from_dict(data).embed``."""
        warn_moved("from_dict", "IndexEmbedSettings.from_dict (its .embed is the EmbedSettings)")
        index = IndexEmbedSettings.from_dict(data)
        own = {f.name: getattr(index, f.name) for f in dataclasses.fields(index) if f.name != "embed"}
        return carry(index.embed, index.embed, own)


@dataclass(frozen=True)
class RunOptions:
    """Speed switches of one encode call or training run: none of them changes an embedding beyond rounding.

    Raises:
        ValueError: a value out of range (:meth:`check` tells whether ``share_prefix`` applies).
    """

    batch_size: int = _field(DEFAULT_BATCH_SIZE)  # texts per forward pass (encode's batch_size keyword)
    # short texts fill a batch past batch_size while rows x padded tokens fit (0: batch_size texts per batch)
    batch_tokens: int = _field(DEFAULT_BATCH_TOKENS, "call")
    # the CPU inference fast path where it applies (genembed.encoders.fast_decoder)
    fast_path: bool = _field(True, "call")
    # soft tokens on the transformers path: each instruction's prefix computed once per batch (same
    # embeddings up to rounding; genembed.encoders.shared_prefix); causal attention only
    share_prefix: bool = _field(False, "call", "train")
    # inference (no gradients), causal attention: each prefix's states (template and instruction before the
    # text) computed once and kept in the model's bounded cache (same embeddings up to rounding;
    # genembed.encoders.prefix_cache); False runs every prompt whole
    cache_prefix: bool = _field(True, "call")

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if isinstance(self.batch_tokens, bool) or not isinstance(self.batch_tokens, int) or self.batch_tokens < 0:
            raise ValueError(f"batch_tokens must be an int >= 0, got {self.batch_tokens!r}")

    @classmethod
    def of(cls, settings: EmbedSettings | None) -> RunOptions:
        """The defaults, or those given to ``settings`` the former way (``EmbedSettings(batch_size=...)``)."""
        return cls(**moved_values(settings, cls))

    def check(self, settings: EmbedSettings) -> RunOptions:
        """These options, when they apply to ``settings``; ValueError otherwise."""
        rules = settings.rules
        if self.share_prefix and (not rules.uses_steps or settings.attention != "causal" or not settings.use_cache):
            raise ValueError(
                "share_prefix needs a soft-token method (gircse), causal attention and use_cache=True, "
                f"got method {settings.method!r}, attention {settings.attention!r}, use_cache {settings.use_cache}"
            )
        return self

    def replace(self, **changes: Any) -> RunOptions:
        """A copy with the ``changes`` that are not None (checked again)."""
        return _replace_given(self, changes)


@dataclass(frozen=True)
class IndexEmbedSettings:
    """How an index embeds: its :class:`EmbedSettings` and what it records besides, the ``embed`` section of
    its manifest (:meth:`to_dict`; the JSON keys older genembed reads). An :class:`EmbedSettings` field
    reads through (``index.settings.method``).

    Raises:
        ValueError: a bad ``truncate_dim`` or ``center``.
    """

    embed: EmbedSettings = _field(None, factory=EmbedSettings)  # how texts (chunks and queries) are embedded
    query_instruction: str = _field(DEFAULT_QUERY_INSTRUCTION, "index")  # the instruction queries get
    doc_instruction: str = _field("", "index")  # the instruction documents get
    center: bool = _field(False, "index")  # subtract each instruction's center (genembed.encoders.centering)
    truncate_dim: int | None = _field(None, "index")  # keep the first truncate_dim dimensions (None: all)

    def __post_init__(self) -> None:
        if not isinstance(self.embed, EmbedSettings):
            raise TypeError(f"embed must be an EmbedSettings, got {type(self.embed).__name__}")
        OutputSettings(center=self.center, truncate_dim=self.truncate_dim)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "embed":  # (copy and pickle probe before the fields are set)
            raise AttributeError(name)
        return getattr(self.embed, name)

    @classmethod
    def of(cls, settings: EmbedSettings | IndexEmbedSettings, **changes: Any) -> IndexEmbedSettings:
        """``settings`` as an index's, with ``changes`` (None keeps a field): an :class:`EmbedSettings`
        brings the defaults, or the index fields given to it the former way."""
        if isinstance(settings, IndexEmbedSettings):
            return settings.replace(**changes)
        return cls(embed=settings, **moved_values(settings, cls)).replace(**changes)

    def replace(self, **changes: Any) -> IndexEmbedSettings:
        """A copy with the ``changes`` that are not None, an :class:`EmbedSettings` field changing :attr:`embed`."""
        changes = dict(changes)
        embed = {k: changes.pop(k) for k in tuple(changes) if k in EmbedSettings.__dataclass_fields__}
        embed = {k: v for k, v in embed.items() if v is not None}
        if embed:
            changes["embed"] = self.embed.replace(**embed)
        return _replace_given(self, changes)

    def instruction(self, kind: str) -> str:
        """The instruction of a ``"query"`` or a ``"doc"``."""
        if kind not in ("query", "doc"):
            raise ValueError(f"kind must be 'query' or 'doc', got {kind!r}")
        return self.query_instruction if kind == "query" else self.doc_instruction

    def prompt_ids(self, tokenizer: Any, texts: list[str], kind: str) -> list[list[int]]:
        """Token ids of each text's embedding prompt: the segment it contributes to a RAG context."""
        return [p.ids for p in tokenize(tokenizer, texts, self.instruction(kind), self.embed)]

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``embed`` section (a method's own prompt format is written as ``""``;
        ``truncate_dim`` only when set, so an index of whole vectors writes what older ones hold)."""
        out = {name: getattr(self, name) for name in fields_for("index")}
        if out["prompt_format"] == self.embed.rules.prompt_format:
            out["prompt_format"] = ""
        if out["truncate_dim"] is None:
            del out["truncate_dim"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexEmbedSettings:
        """Settings from :meth:`to_dict` (unknown keys ignored; a fixed attention is the method's)."""
        embed = {k: v for k, v in data.items() if k in EmbedSettings.__dataclass_fields__}
        if method_rules(embed.get("method", DEFAULT_METHOD)).fixed_attention:
            embed.pop("attention", None)  # older manifests may hold the unused default, causal
        own = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "embed"}
        return cls(embed=EmbedSettings(**embed), **own)


@dataclass(frozen=True)
class OutputSettings:
    """The steps after the core one call asks for (:mod:`genembed.encoders.output` applies them).

    Raises:
        ValueError: ``center`` or ``normalize`` not a bool, a bad ``truncate_dim`` or ``precision``.
    """

    center: bool = False  # subtract the instruction's center (genembed.encoders.centering)
    truncate_dim: int | None = None  # keep the first truncate_dim dimensions (None: all)
    normalize: bool = True  # L2-normalise (after truncation)
    precision: str = "float32"  # one of genembed.encoders.quantize.PRECISIONS

    def __post_init__(self) -> None:
        for name in ("center", "normalize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        check_truncate_dim(self.truncate_dim)
        check_precision(self.precision)

    def replace(self, **changes: Any) -> Self:
        """A copy with the ``changes`` that are not None (checked again)."""
        return _replace_given(self, changes)


@dataclass(frozen=True)
class CallSettings:
    """What one ``encode`` call runs with, one object per concern, each checked when the call begins."""

    embed: EmbedSettings
    run: RunOptions
    output: OutputSettings

    @classmethod
    def build(
        cls,
        own: Mapping[str, Any] | EmbedSettings | IndexEmbedSettings,
        output: OutputSettings,
        changes: Mapping[str, Any],
    ) -> CallSettings:
        """A call's settings: ``own`` (a model's settings by name, or a whole :class:`EmbedSettings`, or an
        index's, embedding as its queries and chunks are) and ``output`` (the model's steps after the core)
        with ``changes`` made, each change going to the object whose field it names (None keeps a field;
        :func:`override_fields` for the embedding)."""
        own = own.embed if isinstance(own, IndexEmbedSettings) else own
        changes = dict(changes)
        run = {k: changes.pop(k) for k in tuple(changes) if k in RunOptions.__dataclass_fields__}
        out = {k: changes.pop(k) for k in tuple(changes) if k in OutputSettings.__dataclass_fields__}
        if isinstance(own, EmbedSettings):
            embed, base = own.override(**changes), own
        else:
            embed, base = EmbedSettings.build(**override_fields(own, changes)), None
        return cls(embed, RunOptions.of(base).replace(**run).check(embed), output.replace(**out))


# the fields that decide an encoded text's embedding: what centers are memoised under
EMBEDDING_FIELDS = tuple(f.name for f in dataclasses.fields(EmbedSettings))
_SETTINGS_TYPES = (EmbedSettings, RunOptions, IndexEmbedSettings)


def fields_for(role: str) -> tuple[str, ...]:
    """The settings fields marked with ``role`` (one of ``"vector"``, ``"index"``, ``"call"``, ``"train"``;
    see the comment above :class:`EmbedSettings`), in their order: EmbedSettings', then RunOptions' and
    IndexEmbedSettings'."""
    if role not in _ROLES:
        raise ValueError(f"role must be one of {_ROLES}, got {role!r}")
    if role == "vector":
        return EMBEDDING_FIELDS
    return tuple(f.name for cls in _SETTINGS_TYPES for f in dataclasses.fields(cls) if role in f.metadata["roles"])


def build_keywords() -> tuple[str, ...]:
    """The keywords :meth:`EmbedSettings.build` takes besides the fields (``max_steps``)."""
    import inspect

    names = inspect.signature(EmbedSettings.build).parameters
    return tuple(n for n in names if n not in EmbedSettings.__dataclass_fields__ and n not in ("cls", "fields"))


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


# one release of the former EmbedSettings fields (speed and index ones), each warning and naming its home
install(
    EmbedSettings,
    {f.name: home for home in (RunOptions, IndexEmbedSettings) for f in dataclasses.fields(home) if f.name != "embed"},
    check=lambda settings: (RunOptions.of(settings).check(settings), IndexEmbedSettings.of(settings)),
)
