"""``encode``: texts in, embeddings out, for every method genembed offers.

Methods:
- ``gircse``: K soft tokens generated after the prompt; ``z_K`` = mean of their hidden states.
- ``mean``: one pass, mean of the text tokens' last hidden states (instruction tokens are attended
  to but not pooled).
- ``last``: one pass, the last token's hidden state (with ``chat`` prompts, the token before the
  assistant's reply).
- ``grit``: GRIT's embedding mode: ``mean`` with bidirectional attention.

Texts are sorted by length into batches and the input order restored; every batch is left-padded
with explicit position ids, so an embedding does not depend on its batch mates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..backbone.attention import check_attention, run_decoder
from .batching import collate, length_sorted_batches
from .fast_decoder import FastDecoder
from .methods import DEFAULT_METHOD, METHODS, method_rules
from .pooling import last_token_pool, masked_mean, running_means
from .prompts import PROMPT_FORMATS, encode_prompts
from .quantize import quantize_embeddings
from .soft_tokens import generate_soft_tokens

__all__ = ["METHODS", "EncodeOptions", "encode_texts", "validate_texts"]


@dataclass
class EncodeOptions:
    """Validated encoding settings (see :meth:`genembed.GenerativeEmbedder.encode`)."""

    method: str = DEFAULT_METHOD
    steps: int = 5
    adaptive: bool = False
    stop_tol: float = 0.999
    attention: str = "causal"
    prompt_format: str = "chat"
    tau: float = 1.0
    max_length: int = 512
    batch_size: int = 32
    use_cache: bool = True
    fast_path: bool = True  # the CPU inference fast path where it applies (genembed.encoders.fast_decoder)

    @classmethod
    def build(
        cls,
        *,
        method: str = DEFAULT_METHOD,
        steps: int | str = 5,
        max_steps: int = 20,
        stop_tol: float = 0.999,
        attention: str | None = None,
        prompt_format: str | None = None,
        tau: float = 1.0,
        max_length: int = 512,
        batch_size: int = 32,
        use_cache: bool = True,
        fast_path: bool = True,
    ) -> EncodeOptions:
        rules = method_rules(method)
        attention = rules.check_attention(attention)
        check_attention(attention)
        prompt_format = prompt_format or rules.prompt_format
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
        adaptive = steps == "auto"
        if adaptive:
            steps = max_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive int or 'auto', got {steps!r}")
        if not 0.0 < stop_tol < 1.0:
            raise ValueError(f"stop_tol must be in (0, 1), got {stop_tol}")
        if max_length < 1 or batch_size < 1:
            raise ValueError(f"max_length and batch_size must be >= 1, got {max_length} and {batch_size}")
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        return cls(
            method,
            steps,
            adaptive,
            stop_tol,
            attention,
            prompt_format,
            tau,
            max_length,
            batch_size,
            use_cache,
            fast_path,
        )


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
    options: EncodeOptions,
    *,
    instruction: str = "",
    return_all_steps: bool = False,
    show_progress_bar: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Encode texts; return un-normalized embeddings ``(n, D)`` (or ``(n, K, D)`` with
    ``return_all_steps``) in input order, and for adaptive GIRCSE the steps used per text."""
    model, tokenizer = backbone.model, backbone.tokenizer
    device = next(model.parameters()).device
    dim = model.config.hidden_size if hasattr(model, "config") else None
    steps = method_rules(options.method).steps(options.steps)
    if not texts:
        shape = (0, steps, dim) if return_all_steps else (0, dim)
        return torch.zeros(shape), None
    prompts = encode_prompts(
        tokenizer,
        texts,
        instruction=instruction,
        prompt_format=options.prompt_format,
        max_length=options.max_length,
    )
    batches = length_sorted_batches([len(p.ids) for p in prompts], options.batch_size)
    results: list[torch.Tensor | None] = [None] * len(texts)
    used: list[int] = [steps] * len(texts)
    if show_progress_bar is None:
        show_progress_bar = len(batches) > 8
    fast = FastDecoder.build(model) if options.fast_path and options.use_cache else None
    from tqdm.auto import tqdm

    with tqdm(total=len(texts), desc=f"encode ({options.method})", disable=not show_progress_bar, unit="text") as bar:
        for indices in batches:
            batch = collate([prompts[i] for i in indices], tokenizer.pad_token_id).to(device)
            vectors, steps_used = _encode_batch(model, batch, options, return_all_steps, fast)
            for row, i in enumerate(indices):
                results[i] = vectors[row].float().cpu()
                if steps_used is not None:
                    used[i] = int(steps_used[row])
            bar.update(len(indices))
    stacked = torch.stack(results)  # type: ignore[arg-type]
    return stacked, (torch.tensor(used) if options.adaptive else None)


def _encode_batch(
    model: Any, batch: Any, options: EncodeOptions, return_all_steps: bool, fast: FastDecoder | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    rules = method_rules(options.method)
    causal = options.attention == "causal"
    stop_tol = options.stop_tol if options.adaptive else None
    if rules.uses_steps:
        if fast is not None:
            out = fast.soft_tokens(
                batch.input_ids,
                batch.attention_mask,
                steps=options.steps,
                tau=options.tau,
                causal=causal,
                stop_tol=stop_tol,
            )
        else:
            out = generate_soft_tokens(
                model,
                batch.input_ids,
                batch.attention_mask,
                steps=options.steps,
                tau=options.tau,
                attention=options.attention,
                use_cache=options.use_cache,
                stop_tol=stop_tol,
            )
        z = running_means(out.hidden)  # (B, K, D)
        if return_all_steps:
            return z, out.steps_used
        if options.adaptive:
            return z[torch.arange(z.shape[0]), out.steps_used - 1], out.steps_used
        return z[:, -1], None
    if fast is not None:
        hidden, lengths, text_mask = fast.hidden_states(
            batch.input_ids, batch.attention_mask, batch.text_mask, causal=causal
        )
        last = hidden[torch.arange(hidden.shape[0]), lengths - 1]
    else:
        hidden = run_decoder(
            model, input_ids=batch.input_ids, attention_mask=batch.attention_mask, attention=options.attention
        ).last_hidden_state
        text_mask, last = batch.text_mask, last_token_pool(hidden)
    pooled = last if rules.pooling == "last" else masked_mean(hidden, text_mask)
    return (pooled[:, None] if return_all_steps else pooled), None


def to_output(
    embeddings: torch.Tensor,
    *,
    normalize: bool,
    convert_to_numpy: bool,
    single: bool,
    truncate_dim: int | None = None,
    precision: str = "float32",
) -> np.ndarray | torch.Tensor:
    """Truncate to the first ``truncate_dim`` dimensions, normalize (L2, last axis), quantize to
    ``precision`` (:mod:`genembed.encoders.quantize`) and convert, in sentence-transformers' order;
    a single input string gives one vector."""
    if truncate_dim is not None:
        embeddings = embeddings[..., :truncate_dim]
    if normalize and embeddings.numel():
        embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
    if precision != "float32":
        embeddings = torch.from_numpy(quantize_embeddings(embeddings, precision))
    if single:
        embeddings = embeddings[0]
    return embeddings.numpy() if convert_to_numpy else embeddings
