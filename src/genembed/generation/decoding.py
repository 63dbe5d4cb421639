"""Token-by-token decoding on top of an optional pre-filled KV cache.

``decode_stream`` is the one decoding loop genembed uses (chat, RAG, the CLI): it runs new tokens
through the decoder with causal attention, extending a transformers ``Cache`` in place, and yields
generated token ids lazily, so a caller can stream text and stop early. Only the last position goes
through the LM head. Positions are explicit, so callers can place cached passages at chosen RoPE
positions and continue after them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Unpack

import torch

from ..backbone.attention import run_decoder
from .sampling import SamplingKwargs, SamplingOptions

__all__ = ["decode_stream", "lm_head", "sample_next"]


def lm_head(model: Any) -> torch.nn.Module:
    """The output projection of a causal LM (or of the model inside a peft wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(base).__name__} has no LM head: generation needs a causal LM")
    return head


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = SamplingOptions.temperature,
    top_p: float = SamplingOptions.top_p,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick one token per row from next-token logits.

    Args:
        logits: ``(B, V)`` next-token logits.
        temperature: 0 picks the argmax (greedy); otherwise logits are divided by it before sampling.
        top_p: nucleus sampling: sample only among the most probable tokens whose cumulative
            probability reaches ``top_p`` (the top token is always kept). 1.0 keeps all.
        generator: a seeded ``torch.Generator`` for reproducible sampling.

    Returns:
        ``(B,)`` token ids (``torch.long``).

    Raises:
        ValueError: ``temperature < 0`` or ``top_p`` outside ``(0, 1]``.
    """
    SamplingOptions(temperature=temperature, top_p=top_p)  # checks them
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, vocab), got shape {tuple(logits.shape)}")
    if temperature < torch.finfo(torch.float32).tiny:  # 0, or so small that float32 division gives 0/0: greedy
        return logits.argmax(dim=-1)
    logits = logits.float()
    shifted = logits - logits.amax(dim=-1, keepdim=True)  # <= 0: a small temperature underflows, never overflows
    probs = torch.softmax(shifted / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # drop a token when the tokens ranked above it already reach top_p
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop = before >= top_p
        drop[..., 0] = False  # the top token always stays (a top_p below float32's smallest value is 0 here)
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


@torch.no_grad()
def decode_stream(
    model: Any,
    input_ids: torch.LongTensor,
    *,
    cache: Any = None,
    attention_mask: torch.LongTensor | None = None,
    position_ids: torch.LongTensor | None = None,
    sampling: SamplingOptions | None = None,
    eos_token_ids: set[int] | frozenset[int] = frozenset(),
    generator: torch.Generator | None = None,
    logits_processor: Any = None,
    **options: Unpack[SamplingKwargs],
) -> Iterator[int]:
    """Yield generated token ids one at a time (batch 1, causal attention).

    The new ``input_ids`` run on top of ``cache`` (which is extended in place, and holds prompt and
    generated tokens afterwards); each generated token is fed back at the previous position + 1.
    Work happens lazily: stopping the iteration early costs nothing more.

    Args:
        model: a causal LM (or peft wrapper).
        input_ids: ``(1, T)`` new tokens, ``T >= 1``.
        cache: a transformers ``Cache`` holding earlier tokens (e.g. a pre-filled prompt or passages),
            or None to start from scratch.
        attention_mask: ``(1, past + T)``; defaults to all ones.
        position_ids: ``(1, T)`` RoPE positions of the new tokens; defaults to continuing after the
            cache's length (``past, past + 1, ...``).
        sampling: how tokens are picked (:class:`~genembed.generation.sampling.SamplingOptions`; None: the
            defaults), changed by ``options`` (its keywords, e.g. ``max_new_tokens=16``).
        eos_token_ids: generation stops when one of these is produced (it is not yielded).
        generator: a ``torch.Generator`` for sampling (None: one seeded with ``sampling.seed``, if set).
        logits_processor: transformers logits processors (None: ``sampling``'s,
            :meth:`~genembed.generation.sampling.SamplingOptions.logits_processor`),
            called with the ids generated so far, *not* the prompt (so a repetition penalty does not
            discourage copying from the prompt), before each token after the first is picked.

    Yields:
        Generated token ids (python ints).

    Raises:
        ValueError: bad shapes or settings (raised on the first ``next()``).
    """
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must have shape (1, T) with T >= 1, got {tuple(input_ids.shape)}")
    sampling = SamplingOptions.build(sampling, **options)
    device = input_ids.device
    if generator is None:
        generator = sampling.generator(device)
    if logits_processor is None:
        logits_processor = sampling.logits_processor()
    past = cache.get_seq_length() if cache is not None else 0
    n_new = input_ids.shape[1]
    if attention_mask is None:
        attention_mask = torch.ones((1, past + n_new), dtype=torch.long, device=device)
    elif tuple(attention_mask.shape) != (1, past + n_new):
        raise ValueError(
            f"attention_mask must cover past + new tokens: expected shape (1, {past + n_new}), "
            f"got {tuple(attention_mask.shape)}"
        )
    if position_ids is None:
        position_ids = torch.arange(past, past + n_new, device=device)[None]
    elif tuple(position_ids.shape) != (1, n_new):
        raise ValueError(f"position_ids must have shape (1, {n_new}), got {tuple(position_ids.shape)}")
    if cache is None:
        from transformers import DynamicCache

        cache = DynamicCache()
    head = lm_head(model)
    eos = frozenset(int(t) for t in eos_token_ids)
    ids, positions = input_ids, position_ids
    generated: list[int] = []
    for step in range(sampling.max_new_tokens):
        out = run_decoder(
            model,
            input_ids=ids,
            attention_mask=attention_mask,
            attention="causal",
            position_ids=positions,
            cache=cache,
            use_cache=True,
        )
        logits = head(out.last_hidden_state[:, -1])  # (1, V)
        if logits_processor is not None and generated:
            logits = logits_processor(torch.tensor([generated], device=device), logits)
        token = int(sample_next(logits, temperature=sampling.temperature, top_p=sampling.top_p, generator=generator)[0])
        if token in eos:
            return
        generated.append(token)
        yield token
        if step + 1 == sampling.max_new_tokens:
            return
        ids = torch.tensor([[token]], dtype=torch.long, device=device)
        positions = positions[:, -1:] + 1
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((1, 1))], dim=-1)
