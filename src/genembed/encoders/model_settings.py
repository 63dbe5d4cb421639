"""A loaded model's settings: what decides its vectors, in one frozen dataclass.

``model.settings`` is a :class:`ModelSettings`; ``model.with_settings(...)`` (or assigning
``model.settings``) changes it, checked. ``genembed.json`` stores :meth:`ModelSettings.to_dict` (its
``encode`` section and the named instructions beside it) and loading reads :meth:`ModelSettings.from_dict`,
so the file's fields are this class's. The settings of one ``encode`` call are derived from it
(:meth:`ModelSettings.embed_settings`: an :class:`~genembed.encoders.settings.EmbedSettings`), and so are
the steps after the core (:attr:`ModelSettings.output`: centring and ``truncate_dim``).

Runtime switches (batch size, device, dtype, caches) are not settings of the model: they are ``encode``'s
keywords (:class:`~genembed.encoders.settings.RunOptions`). An index records its own settings in its
manifest (:class:`~genembed.encoders.settings.IndexEmbedSettings`). One ``encode`` call's settings, one
object per concern, are :meth:`ModelSettings.call_settings`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .defaults import DEFAULT_MAX_LENGTH
from .instructions import check_prompts, default_prompts
from .methods import DEFAULT_METHOD, DEFAULT_STEPS, DEFAULT_TAU, method_rules
from .output import OutputPipeline
from .settings import CallSettings, EmbedSettings, IndexEmbedSettings, OutputSettings, fields_for, override_fields
from .similarity import check_similarity_fn

__all__ = ["ModelSettings"]

_ENCODE = "encode"  # the genembed.json section a field is stored in (None: the top level)


def _saved(default: Any, section: str | None = _ENCODE, *, factory: Any = None) -> Any:
    metadata = {"section": section}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ModelSettings:
    """What decides a loaded model's vectors: the names ``genembed.load`` takes and ``genembed.json`` stores.

    Raises:
        ValueError: a bad setting (the message names it and, for a name, the valid choices).
        TypeError: ``prompts`` is not a dict of strings to strings or None.
    """

    method: str = _saved(DEFAULT_METHOD)  # a name in genembed.encoders.methods.METHODS
    steps: int | str = _saved(DEFAULT_STEPS)  # GIRCSE's K, or "auto"
    attention: str | None = _saved(None)  # None: the method's
    prompt_format: str | None = _saved(None)  # None: the method's
    tau: float = _saved(DEFAULT_TAU)  # soft-token softmax temperature
    center: bool = _saved(False)  # subtract each instruction's center (genembed.encoders.centering)
    truncate_dim: int | None = _saved(None)  # keep the first truncate_dim dimensions (None: all)
    max_length: int = _saved(DEFAULT_MAX_LENGTH)  # tokens per prompt
    # named instructions (genembed.encoders.instructions.NAMED_INSTRUCTIONS by default); None: the caller's
    prompts: dict[str, str | None] = _saved(None, None, factory=default_prompts)
    default_prompt_name: str | None = _saved(None, None)  # the prompt encode uses when given no instruction
    similarity_fn_name: str = _saved("cosine", None)  # cosine, dot, euclidean or manhattan

    def __post_init__(self) -> None:
        self.embed_settings()  # checks method, steps, attention, prompt format, tau and max_length
        OutputSettings(center=self.center, truncate_dim=self.truncate_dim)  # checks center and truncate_dim
        object.__setattr__(self, "prompts", check_prompts(self.prompts))
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            names = sorted(self.prompts)
            raise ValueError(f"default_prompt_name {self.default_prompt_name!r} is not in this model's prompts {names}")
        check_similarity_fn(self.similarity_fn_name)

    @classmethod
    def fields_in(cls, section: str | None) -> tuple[str, ...]:
        """The fields ``genembed.json`` stores in ``section`` (``"encode"``, or None: the top level)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata["section"] == section)

    @property
    def pooling(self) -> str:
        """How the method pools (``soft_tokens``, ``mean`` or ``last``): it follows from :attr:`method`."""
        return method_rules(self.method).pooling

    @property
    def output(self) -> OutputPipeline:
        """The steps after the core these settings ask for (centring, ``truncate_dim``; normalised)."""
        return OutputPipeline(center=self.center, truncate_dim=self.truncate_dim)

    def embed_settings(self, **changes: Any) -> EmbedSettings:
        """The :class:`~genembed.encoders.settings.EmbedSettings` of one ``encode`` call: these settings'
        fields that an encode call may change, changed by ``changes``
        (:func:`~genembed.encoders.settings.override_fields`: None keeps the model's; another method brings
        its own attention and prompt format)."""
        return EmbedSettings.build(**override_fields(self._call_fields(), changes))

    def call_settings(
        self, settings: EmbedSettings | IndexEmbedSettings | None, changes: Mapping[str, Any]
    ) -> CallSettings:
        """The :class:`~genembed.encoders.settings.CallSettings` of one ``encode`` call, checked before any
        work: these settings' (or ``settings``, a whole :class:`~genembed.encoders.settings.EmbedSettings`)
        and their centring and ``truncate_dim``, with ``changes`` by name (None keeps a field; speed
        switches and output steps included: ``batch_size``, ``precision``, ...)."""
        output = OutputSettings(center=self.center, truncate_dim=self.truncate_dim)
        return CallSettings.build(self._call_fields() if settings is None else settings, output, changes)

    def _call_fields(self) -> dict[str, Any]:
        """These settings' fields an encode call may change (the ones an EmbedSettings takes)."""
        return {name: getattr(self, name) for name in self.fields_in(_ENCODE) if name in fields_for("call")}

    def replace(self, **changes: Any) -> ModelSettings:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """What ``genembed.json`` stores: ``{"encode": {...}, "prompts": ..., ...}``."""
        out: dict[str, Any] = {_ENCODE: {name: getattr(self, name) for name in self.fields_in(_ENCODE)}}
        return out | {name: getattr(self, name) for name in self.fields_in(None)}

    @classmethod
    def resolve(
        cls,
        given: Mapping[str, Any],
        *,
        own: Mapping[str, Any] | None = None,
        saved: dict[str, Any] | None = None,
        trained: Mapping[str, Any] | None = None,
        center: bool = False,
    ) -> ModelSettings:
        """The settings a loaded model gets (:func:`genembed.load`): the one rule, each layer changing the one
        before (:func:`~genembed.encoders.settings.override_fields`: None keeps; another method brings its
        own attention and prompt format).

        Args:
            given: the caller's (``load``'s keywords; None: not given).
            own: a published checkpoint's (its authors' method, K, prompts, ...), under everything else.
            saved: a saved model's ``genembed.json`` (:meth:`to_dict`'s layout), checked here.
            trained: what the adapter was trained with (its own ``genembed.json``, centring left out); its
                named instructions and similarity replace the ones below.
            center: centring, decided apart (:func:`genembed.models.assemble.centering`).
        """
        layers = dict(own or {})
        if saved is not None:
            kept = cls.from_dict(saved)
            layers = {name: getattr(kept, name) for name in cls.fields_in(None) + cls.fields_in(_ENCODE)}
        top = {name: value for name, value in (trained or {}).items() if name in cls.fields_in(None)}
        encode = {name: value for name, value in (trained or {}).items() if name not in top}
        fields = override_fields(override_fields(layers, encode), given) | top
        return cls(**(fields | {"center": center}))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSettings:
        """Settings from :meth:`to_dict` (a field not there takes its default; other keys are ignored)."""
        encode = data.get(_ENCODE) or {}
        values = {name: encode[name] for name in cls.fields_in(_ENCODE) if name in encode}
        return cls(**values, **{name: data[name] for name in cls.fields_in(None) if name in data})
