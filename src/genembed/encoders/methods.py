"""The embedding methods and their rules: the one place that says how each method embeds.

Every part of genembed that embeds (``encode``, the training forward, index building, the server,
evaluation) looks a method up here instead of testing its name, the way PEFT keeps one registry of
tuners. A new method is one more row of :data:`METHOD_RULES` (plus its pooling, if new, in
:func:`genembed.encoders.core.embed_prepared`).

===========  =================  ==============  =====================================  ==========
method       attention          prompt format   pooling                                loss
===========  =================  ==============  =====================================  ==========
``gircse``   causal (settable)  chat            K soft tokens, mean of their states    ICR
``mean``     causal (settable)  plain           mean of the text tokens                InfoNCE
``last``     causal (settable)  plain           the prompt's last token                InfoNCE
``grit``     bidirectional      plain           mean of the text tokens                InfoNCE
===========  =================  ==============  =====================================  ==========

Instruction and template tokens are attended to but never pooled (:mod:`genembed.encoders.prompts`).
"""

from __future__ import annotations

from dataclasses import dataclass

# the methods' defaults are declared with every other encoding default (re-exported here)
from .defaults import DEFAULT_MAX_STEPS, DEFAULT_METHOD, DEFAULT_STEPS, DEFAULT_TAU

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_METHOD",
    "DEFAULT_STEPS",
    "DEFAULT_TAU",
    "METHODS",
    "POOLINGS",
    "METHOD_RULES",
    "SOFT_TOKEN_METHOD",
    "MethodRules",
    "method_for_pooling",
    "method_rules",
]


# how a method pools: K generated soft tokens' states, or one pass's text tokens (mean) or last token
POOLINGS = ("soft_tokens", "mean", "last")


@dataclass(frozen=True)
class MethodRules:
    """How one embedding method embeds."""

    name: str
    pooling: str  # "soft_tokens" (GIRCSE: mean of K generated soft tokens' states), "mean" or "last"
    prompt_format: str  # the default prompt format (a name in genembed.encoders.prompts.PROMPT_FORMATS)
    fixed_attention: str | None  # the attention the method always uses; None: the caller's (causal by default)
    loss: str  # the contrastive training loss: "icr" (stepwise, over z_1..z_K) or "info_nce"

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r} (method {self.name!r})")

    @property
    def uses_steps(self) -> bool:
        """Whether the method generates K soft tokens (and so takes ``steps``)."""
        return self.pooling == "soft_tokens"

    def steps(self, k: int) -> int:
        """The number of embeddings one text gets: K for soft-token methods, 1 for single-pass ones."""
        return k if self.uses_steps else 1

    def attention(self, requested: str | None = None) -> str:
        """The attention this method runs with when ``requested`` (None: not chosen) is asked for; a method
        with a fixed attention ignores the request (see :meth:`check_attention` to refuse it instead)."""
        return self.fixed_attention or requested or "causal"

    def check_attention(self, requested: str | None) -> str:
        """:meth:`attention`, raising ValueError when a fixed-attention method is asked for another one."""
        if self.fixed_attention and requested not in (None, self.fixed_attention):
            raise ValueError(f"method {self.name!r} always uses {self.fixed_attention} attention")
        return self.attention(requested)


METHOD_RULES: dict[str, MethodRules] = {
    rules.name: rules
    for rules in (
        MethodRules("gircse", pooling="soft_tokens", prompt_format="chat", fixed_attention=None, loss="icr"),
        MethodRules("mean", pooling="mean", prompt_format="plain", fixed_attention=None, loss="info_nce"),
        MethodRules("last", pooling="last", prompt_format="plain", fixed_attention=None, loss="info_nce"),
        MethodRules("grit", pooling="mean", prompt_format="plain", fixed_attention="bidirectional", loss="info_nce"),
    )
}
METHODS = tuple(METHOD_RULES)
if DEFAULT_METHOD not in METHOD_RULES:  # genembed.encoders.defaults names a method of this table
    raise ImportError(f"DEFAULT_METHOD {DEFAULT_METHOD!r} is not one of {METHODS}")


def method_rules(method: str) -> MethodRules:
    """The rules of ``method``; ValueError (listing the methods) for an unknown name."""
    try:
        return METHOD_RULES[method]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {METHODS}, got {method!r}") from None


def method_for_pooling(pooling: str | None, method: str | None = None) -> str | None:
    """The method that pools as ``pooling`` (a name in :data:`POOLINGS`), for ``genembed.load(pooling=...)``.

    Pooling is not a setting of its own: each method pools one way (the table above), so a model stores
    its method only. ``pooling`` picks the first method that pools so (``"soft_tokens"``: gircse,
    ``"mean"``: mean, ``"last"``: last; GRIT is mean pooling with bidirectional attention: ``method="grit"``).
    With ``method`` given too, the two must agree. None: ``method`` as given.

    Raises:
        ValueError: an unknown pooling (listing them), or a method that pools otherwise.
    """
    if pooling is None:
        return method
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if method is not None:
        if method_rules(method).pooling != pooling:
            raise ValueError(f"method {method!r} pools by {method_rules(method).pooling!r}, not {pooling!r}")
        return method
    return next(name for name, rules in METHOD_RULES.items() if rules.pooling == pooling)


# the method that generates soft tokens (what ``inspect`` shows and step sweeps run)
SOFT_TOKEN_METHOD = next(name for name, rules in METHOD_RULES.items() if rules.uses_steps)
