"""``encode``: texts in, embeddings out, for every method genembed offers.

The methods and their rules are in :mod:`genembed.encoders.methods`; each batch is embedded by
:func:`genembed.encoders.core.embed_prepared`.

Texts are sorted by length into batches (``batch_size`` texts, or more short ones while their padded
tokens fit ``batch_tokens``) and the input order restored; every batch is left-padded with explicit
position ids, so an embedding does not depend on its batch mates.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .batching import Batch, collate, length_sorted_batches
from .core import BatchEmbeddings, PrefixLookup, embed_prepared
from .fast_decoder import FastDecoder
from .methods import method_rules
from .prefix_cache import compute_prefix_states, prefix_cache
from .prompts import EncodedPrompt, tokenize
from .settings import EmbedSettings, RunOptions

__all__ = ["embed_prompts", "encode_texts", "validate_texts"]


def validate_texts(texts: Any) -> tuple[list[str], bool]:
    """Return (list of texts, whether a single string was given); TypeError names a bad item's index."""
    if isinstance(texts, str):
        return [texts], True
    if not isinstance(texts, Sequence) and not hasattr(texts, "__iter__"):
        raise TypeError(f"texts must be a string or a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a string, got {type(text).__name__}")
    return texts, False


@torch.inference_mode()
def encode_texts(
    backbone: Any,
    texts: list[str],
    settings: EmbedSettings,
    *,
    run: RunOptions | None = None,
    instruction: str = "",
    return_all_steps: bool = False,
    show_progress_bar: bool | None = None,
    prompts: list[EncodedPrompt] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Encode texts; return un-normalized embeddings ``(n, D)`` (or ``(n, K, D)`` with
    ``return_all_steps``) in input order, and for adaptive GIRCSE the steps used per text.
    ``run``: the speed switches (None: the defaults); ``prompts``: the texts' prompts when already
    tokenized (:func:`~genembed.encoders.prompts.tokenize`), one per text."""
    if prompts is not None:
        if len(prompts) != len(texts):
            raise ValueError(f"{len(prompts)} prompts for {len(texts)} texts; give one prompt per text")
    else:  # (no texts: no check that max_length leaves room for them)
        prompts = tokenize(backbone.tokenizer, texts, instruction, settings) if texts else []
    return embed_prompts(
        backbone, prompts, settings, run=run, return_all_steps=return_all_steps, progress=show_progress_bar
    )


BatchCallback = Callable[[list[int], Batch, BatchEmbeddings], None]


@torch.inference_mode()
def embed_prompts(
    backbone: Any,
    prompts: list[EncodedPrompt],
    settings: EmbedSettings,
    *,
    run: RunOptions | None = None,
    return_all_steps: bool = False,
    keep_kv: bool = False,
    on_batch: BatchCallback | None = None,
    progress: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Embed tokenized prompts in length-sorted batches; results as :func:`encode_texts` gives them.

    Args:
        backbone: a :class:`~genembed.backbone.loading.Backbone`.
        prompts: from :func:`~genembed.encoders.prompts.encode_prompts`.
        settings: how to embed.
        run: the speed switches (``run.batch_size`` prompts per pass, more short ones while their padded
            tokens fit ``run.batch_tokens``; None: the defaults).
        return_all_steps: ``(n, K, D)`` embeddings ``z_1..z_K``.
        keep_kv: keep each batch's KV cache for ``on_batch`` (the transformers path, not the fast path).
        on_batch: called with each batch's prompt indices, the batch and its :class:`BatchEmbeddings`.
        progress: show a progress bar (None: for more than 8 batches).
    """
    run = RunOptions.of(settings) if run is None else run
    model = backbone.model
    device = next(model.parameters()).device
    steps = method_rules(settings.method).steps(settings.steps)
    if not prompts:
        dim = model.config.hidden_size if hasattr(model, "config") else None
        return torch.zeros((0, steps, dim) if return_all_steps else (0, dim)), None
    fast = FastDecoder.build(model) if run.fast_path and settings.use_cache and not keep_kv else None
    prefixes = _prefix_lookup(model, settings, run, fast) if not keep_kv else None
    batches = length_sorted_batches(_run_lengths(prompts, prefixes is not None), run.batch_size, run.batch_tokens)
    results: list[torch.Tensor | None] = [None] * len(prompts)
    used: list[int] = [steps] * len(prompts)
    from tqdm.auto import tqdm

    disable = not (len(batches) > 8 if progress is None else progress)
    with tqdm(total=len(prompts), desc=f"encode ({settings.method})", disable=disable, unit="text") as bar:
        for indices in batches:
            batch = collate([prompts[i] for i in indices], backbone.tokenizer.pad_token_id).to(device)
            out = embed_prepared(
                model, batch, settings, keep_kv=keep_kv, fast=fast, prefixes=prefixes, share_prefix=run.share_prefix
            )
            vectors = out.steps if return_all_steps else out.final
            for row, i in enumerate(indices):
                results[i] = vectors[row].float().cpu()
                if out.steps_used is not None:
                    used[i] = int(out.steps_used[row])
            if on_batch is not None:
                on_batch(indices, batch, out)
            bar.update(len(indices))
    stacked = torch.stack(results)  # type: ignore[arg-type]
    return stacked, (torch.tensor(used) if settings.adaptive else None)


def _run_lengths(prompts: list[EncodedPrompt], after_prefix: bool) -> list[int]:
    """The tokens each prompt runs through the model: after its cached prefix, when there is one (a text
    that is empty runs whole; :mod:`genembed.encoders.shared_prefix`)."""
    if not after_prefix:
        return [len(p.ids) for p in prompts]
    return [len(p.ids) - (p.text_start if p.text_end > p.text_start else 0) for p in prompts]


def _prefix_lookup(
    model: Any, settings: EmbedSettings, run: RunOptions, fast: FastDecoder | None
) -> PrefixLookup | None:
    """The model's cached prefix states for this call, where they apply (causal, cached soft tokens or a
    single pass, no gradients; ``GENEMBED_PREFIX_CACHE=0`` turns it off); see
    :mod:`genembed.encoders.prefix_cache`."""
    if not run.cache_prefix or settings.attention != "causal" or torch.is_grad_enabled():
        return None
    if os.environ.get("GENEMBED_PREFIX_CACHE", "1") == "0":
        return None
    if method_rules(settings.method).uses_steps and not settings.use_cache:
        return None  # the recompute path is the reference: it runs every prompt whole
    if fast is not None:
        return prefix_cache(model).lookup(model, "fast", fast.prefix_states)
    return prefix_cache(model).lookup(model, "transformers", lambda ids: compute_prefix_states(model, ids))
