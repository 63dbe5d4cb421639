"""How :class:`genembed.GenerativeEmbedder` hands a public method to one of its collaborators (encoding,
generation, persistence) without writing its signature and docstring twice.

A collaborator holds no model: each of its methods takes the model it works for after ``self``
(``Encoding.encode(self, model, texts, ...)``), so a model copied by ``with_settings`` can share it.
:func:`delegate` turns such a method into the model's own, with the collaborator's docstring and the
signature a user of the model sees (``encode(self, texts, ...)``), so ``help(model.encode)`` and
``inspect.signature`` show the whole of it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["delegate"]

P = ParamSpec("P")
R = TypeVar("R")


def delegate(method: Callable[Concatenate[Any, Any, P], R], via: str) -> Callable[Concatenate[Any, P], R]:
    """The model's method that calls ``method`` of its collaborator in the attribute ``via`` with the model.

    Args:
        method: a collaborator's method, taking the collaborator and then the model; the collaborator's
            method of that name runs (a subclass's, when it holds one).
        via: the model's attribute that holds the collaborator (looked up per call, so a subclass or an
            instance may hold another).
    """

    name = method.__name__

    @functools.wraps(method)
    def forward(model: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        return getattr(getattr(model, via), name)(model, *args, **kwargs)  # the collaborator's own, overridden or not

    signature = inspect.signature(method)
    parameters = list(signature.parameters.values())
    if len(parameters) < 2:
        raise TypeError(f"{method.__qualname__} must take the collaborator and the model first")
    own = signature.replace(
        parameters=[parameters[1].replace(name="self", annotation=inspect.Parameter.empty), *parameters[2:]]
    )
    forward.__signature__ = own  # type: ignore[attr-defined]
    return forward
