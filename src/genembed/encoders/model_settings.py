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

import copy
import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from .defaults import DEFAULT_MAX_LENGTH
from .instructions import check_prompts, default_prompts
from .methods import DEFAULT_METHOD, DEFAULT_STEPS, DEFAULT_TAU, method_rules
from .output import OutputPipeline
from .settings import CallSettings, EmbedSettings, IndexEmbedSettings, OutputSettings, fields_for, override_fields
from .similarity import check_similarity_fn

__all__ = ["ModelSettings", "SettingsHolder"]

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
    def from_dict(cls, data: dict[str, Any]) -> ModelSettings:
        """Settings from :meth:`to_dict` (a field not there takes its default; other keys are ignored)."""
        encode = data.get(_ENCODE) or {}
        values = {name: encode[name] for name in cls.fields_in(_ENCODE) if name in encode}
        return cls(**values, **{name: data[name] for name in cls.fields_in(None) if name in data})


class SettingsHolder:
    """What holds one :class:`ModelSettings` (:class:`genembed.GenerativeEmbedder`): ``settings``,
    ``with_settings``, ``check_settings`` and each field readable by name (``model.method``); assigning a
    field by name is the former way to change it (deprecated). Needs ``embed_settings``."""

    _settings: ModelSettings

    @property
    def settings(self) -> ModelSettings:
        """What decides the vectors (see the class docstring); assigning it replaces them all."""
        return self._settings

    @settings.setter
    def settings(self, value: ModelSettings) -> None:
        if not isinstance(value, ModelSettings):
            raise TypeError(f"settings must be a ModelSettings, got {type(value).__name__}")
        self._settings = value

    def with_settings(self, **changes: Any) -> Self:
        """This model with ``changes`` to its :attr:`settings` (checked), as a new object over the same
        loaded weights: ``model.with_settings(method="mean", steps=3)``.

        Raises:
            ValueError / TypeError: a bad setting (the message names it); nothing changes.
        """
        changed = copy.copy(self)
        changed.settings = self._settings.replace(**changes)
        return changed

    def check_settings(self) -> EmbedSettings:
        """Check the settings again (the named instructions may have been changed in place,
        ``model.prompts["query"] = ...``); return the :class:`~genembed.encoders.settings.EmbedSettings`
        they give. :meth:`save` calls it before writing anything.

        Raises:
            ValueError: a bad setting (the message names it and, for a name, the valid choices).
            TypeError: ``prompts`` is not a dict of strings to strings or None.
        """
        self._settings = self._settings.replace()
        return self.embed_settings()


def _setting(name: str) -> property:
    """``model.<name>``: a field of ``model.settings``; assigning it is the former way to change it (deprecated)."""

    def get(self: SettingsHolder) -> Any:
        return getattr(self._settings, name)

    def set_(self: SettingsHolder, value: Any) -> None:
        warnings.warn(
            f"model.{name} = ... is deprecated: use model.with_settings({name}=...) or assign model.settings",
            DeprecationWarning,
            stacklevel=2,
        )
        self._settings = self._settings.replace(**{name: value})

    return property(get, set_, doc=f"``settings.{name}`` (:class:`~genembed.encoders.model_settings.ModelSettings`).")


for _name in ModelSettings.fields_in("encode") + ModelSettings.fields_in(None):
    setattr(SettingsHolder, _name, _setting(_name))
