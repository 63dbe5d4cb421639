"""One release of :class:`~genembed.encoders.settings.EmbedSettings`' former speed and index fields.

``EmbedSettings(batch_size=8, center=True)`` still works: each such keyword warns, naming the field's new
home (:class:`~genembed.encoders.settings.RunOptions` or
:class:`~genembed.encoders.settings.IndexEmbedSettings`), and its value is kept beside the settings, where
``RunOptions.of`` and ``IndexEmbedSettings.of`` read it, so it still takes effect; ``settings.batch_size``
reads it back (warning too). :func:`install` adds this to the class; nothing of genembed is imported here.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["carry", "install", "moved_values", "warn_moved"]


def install(cls: type, moved: Mapping[str, type], check: Callable[[Any], object]) -> None:
    """Let ``cls`` take the ``moved`` fields (name -> their new home class) by keyword and show them as
    attributes, for one release; ``check(instance)`` validates the values given (as their homes do)."""
    dataclass_init = cls.__init__  # type: ignore[misc]

    @functools.wraps(dataclass_init)
    def init(self: Any, *args: Any, **fields: Any) -> None:
        given = {name: fields.pop(name) for name in tuple(fields) if name in moved}
        for name in given:
            warnings.warn(_message(name, moved[name]), DeprecationWarning, stacklevel=2)
        dataclass_init(self, *args, **fields)
        if given:
            object.__setattr__(self, "_moved", given)
            check(self)

    cls.__init__ = init  # type: ignore[misc]
    cls._moved = {}  # type: ignore[attr-defined]  # none given the former way
    for name, home in moved.items():
        setattr(cls, name, _moved_field(name, home))


def moved_values(settings: Any, home: type) -> dict[str, Any]:
    """The values of ``home``'s fields given to ``settings`` the former way (none: ``{}``)."""
    fields = getattr(home, "__dataclass_fields__", {})
    return {name: value for name, value in getattr(settings, "_moved", {}).items() if name in fields}


def carry(old: Any, new: Any, extra: Mapping[str, Any] | None = None) -> Any:
    """``new`` keeping the values given to ``old`` the former way (and ``extra``), without warning again."""
    kept = {**old._moved, **(extra or {}), **new._moved}
    if kept:
        object.__setattr__(new, "_moved", kept)
    return new


def warn_moved(what: str, home: str) -> None:
    """Warn that ``what`` of EmbedSettings is deprecated in favour of ``home``."""
    warnings.warn(
        f"EmbedSettings.{what} is deprecated: use genembed.encoders.settings.{home}", DeprecationWarning, stacklevel=3
    )


def _message(name: str, home: type) -> str:
    where = "an index's settings" if "Index" in home.__name__ else "encode's keywords"
    return f"EmbedSettings.{name} is deprecated: it is genembed.encoders.settings.{home.__name__}.{name} ({where})"


def _moved_field(name: str, home: Any) -> property:
    def get(self: Any) -> Any:
        warnings.warn(_message(name, home), DeprecationWarning, stacklevel=2)
        return getattr(home.of(self), name)

    return property(get, doc=f"Deprecated: :attr:`{home.__name__}.{name}`.")
