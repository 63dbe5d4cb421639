"""GIRCSE soft-token generation: the decoder writes K soft tokens and each one's hidden state is pooled.

At step k (k = 1..K) the last hidden state ``h_{k-1}`` (``h_0`` is the prompt's last token) gives

    p_k = softmax(lm_head(h_{k-1}) / tau)        # over the whole vocabulary
    d_k = p_k @ E                                # E: input embedding matrix

and ``d_k`` is fed back as the next input embedding; its output hidden state is ``h_k``. The step-k
embedding is ``z_k = mean(h_1..h_k)``. Only K LM-head projections are computed (the K+1-th soft
token would never be used).

Two paths compute the same ``h_1..h_K`` (tested to 1e-4 in float32):

- cached (default): one prefill, then K single-token steps that feed only the newest soft
  embedding and reuse the KV cache; works with gradients for training.
- recompute: K+1 full forward passes over prompt + soft tokens, as the reference implementation
  does; kept as the ground truth for tests and the training benchmark.

The cached path can also start from the states of a prefix that every prompt of the batch opens with (an
instruction and its template, :class:`~genembed.encoders.prefix_cache.PrefixStates`), computed once: the
batch then holds only each row's remaining tokens, which attend to the prefix's keys and values
(:mod:`genembed.encoders.shared_prefix` finds such groups): the same ``h_1..h_K``, with the prefix's share
of the prefill (and of its backward pass in training) paid once per batch, or once per instruction.

Reference: GIRCSE, "Generative Iterative Refinement for Contrastive Sentence Embeddings".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..backbone.attention import run_decoder
from .methods import DEFAULT_TAU
from .prefix_cache import PrefixStates

__all__ = ["SoftTokenOutput", "generate_soft_tokens", "output_head", "soft_token_loop", "with_prefix_mask"]


@dataclass
class SoftTokenOutput:
    """``hidden``: ``(B, K, D)`` hidden states h_1..h_K of the generated soft tokens.
    ``steps_used``: ``(B,)`` steps each row needed (K unless adaptive stopping ended it early).
    ``top_ids`` / ``top_probs``: ``(B, K, top)`` most probable vocabulary entries of each p_k, if asked.
    ``cache``: the cached path's KV cache (prompt then soft tokens), e.g. for reusing the prompt's states."""

    hidden: torch.Tensor
    steps_used: torch.Tensor
    top_ids: torch.Tensor | None = None
    top_probs: torch.Tensor | None = None
    cache: Any = None


def output_head(model: Any) -> tuple[Any, torch.Tensor]:
    """The LM head module and the input embedding matrix ``E`` ``(V, D)`` of a causal LM (or peft wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_output_embeddings(), base.get_input_embeddings().weight


def _soft_embedding(head: Any, embed: torch.Tensor, h: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, d) for last hidden states ``h`` ``(B, D)``: ``p`` ``(B, V)`` and ``d = p @ E`` ``(B, D)``."""
    logits = head(h).float()  # (B, V)
    probs = torch.softmax(logits / tau, dim=-1)
    return probs, probs.to(embed.dtype) @ embed


def generate_soft_tokens(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    steps: int,
    tau: float = DEFAULT_TAU,
    attention: str = "causal",
    use_cache: bool = True,
    stop_tol: float | None = None,
    top: int = 0,
    prefix: PrefixStates | None = None,
) -> SoftTokenOutput:
    """Generate ``steps`` soft tokens after left-padded prompts.

    Args:
        model: a causal LM (or peft wrapper).
        input_ids, attention_mask: ``(B, T)`` left-padded prompts.
        steps: K, the number of soft tokens (>= 1); with ``stop_tol`` the cap.
        tau: softmax temperature of p_k.
        attention: attention among the prompt tokens; soft tokens see every earlier token either way.
        use_cache: the KV-cached path; False recomputes the whole sequence every step.
        stop_tol: adaptive K: a row stops at the first k >= 2 where cos(z_k, z_{k-1}) > stop_tol;
            its later hidden states repeat its running mean so that z stays frozen.
        top: also return the ``top`` most probable tokens of each p_k.
        prefix: the states of a prefix every prompt opens with; ``input_ids`` then hold each prompt's tokens
            after it (at least one per row). Cached path and causal attention only.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    head, embed = output_head(model)
    prompt_embeds = embed[input_ids]  # (B, T, D)
    if prefix is not None:
        if not use_cache or attention != "causal":
            raise ValueError("a shared prefix needs the cached path (use_cache=True) and causal attention")
        mask = with_prefix_mask(attention_mask, prefix)
        cache = prefix.dynamic_cache(input_ids.shape[0])
        out = run_decoder(model, inputs_embeds=prompt_embeds, attention_mask=mask, attention=attention, cache=cache)
        out.cache = cache
    elif use_cache:
        out = run_decoder(
            model, inputs_embeds=prompt_embeds, attention_mask=attention_mask, attention=attention, use_cache=True
        )
        mask = attention_mask
    if use_cache:
        cache = out.cache
        n_real = mask.sum(dim=1, keepdim=True)  # (B, 1), prefix included
        ones = attention_mask.new_ones((input_ids.shape[0], 1))

        def step(d_k: torch.Tensor, k: int) -> torch.Tensor:
            nonlocal mask
            mask = torch.cat([mask, ones], dim=1)
            out = run_decoder(
                model,
                inputs_embeds=d_k[:, None],
                attention_mask=mask,
                attention=attention,
                position_ids=n_real + (k - 1),
                cache=cache,
            )
            return out.last_hidden_state[:, -1]

        h_0 = out.last_hidden_state[:, -1]
    else:
        cache, soft = None, []

        def step(d_k: torch.Tensor, k: int) -> torch.Tensor:
            soft.append(d_k)
            return _recompute_last(model, prompt_embeds, attention_mask, soft, attention)

        h_0 = _recompute_last(model, prompt_embeds, attention_mask, soft, attention)
    result = soft_token_loop(h_0, step, lambda h: _soft_embedding(head, embed, h, tau), steps, stop_tol, top)
    result.cache = cache
    return result


def soft_token_loop(
    h_0: torch.Tensor,
    step: Callable[[torch.Tensor, int], torch.Tensor],
    soft_embedding: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    stop_tol: float | None = None,
    top: int = 0,
) -> SoftTokenOutput:
    """The K GIRCSE steps over any decoder: ``p_k, d_k = soft_embedding(h_{k-1})``, ``h_k = step(d_k, k)``.

    Shared by the transformers path above and the inference fast path
    (:mod:`genembed.encoders.fast_decoder`); ``stop_tol`` and ``top`` as in :func:`generate_soft_tokens`.
    """
    batch = h_0.shape[0]
    tops: list[tuple[torch.Tensor, torch.Tensor]] = []
    hidden: list[torch.Tensor] = []
    done = torch.zeros(batch, dtype=torch.bool, device=h_0.device)
    steps_used = torch.full((batch,), steps, dtype=torch.long, device=h_0.device)
    # (B, D) sum of h_1..h_k, in float32: in bfloat16 (dtype="auto" on a CPU with native bf16) the running
    # means and their cosine are too coarse for the stop rule, and cos > 0.999 never fired
    running = None
    h_prev = h_0
    for k in range(1, steps + 1):
        probs, d_k = soft_embedding(h_prev)
        if top:
            values, ids = probs.topk(top, dim=-1)
            tops.append((ids, values))
        h_k = step(d_k, k)
        pooled_h = h_k
        if stop_tol is not None and running is not None:
            # rows that already stopped contribute their frozen mean, so z_k stays z_{stop}
            pooled_h = torch.where(done[:, None], running / (k - 1), h_k.float())
            new_running = running + pooled_h
            cos = torch.cosine_similarity(new_running / k, running / (k - 1), dim=-1)
            newly = (cos > stop_tol) & ~done
            steps_used = torch.where(newly, torch.full_like(steps_used, k), steps_used)
            done = done | newly
        running = pooled_h.float() if running is None else running + pooled_h
        hidden.append(pooled_h.to(h_k.dtype))
        h_prev = h_k
        if stop_tol is not None and bool(done.all()):
            break
    hidden_t = torch.stack(hidden, dim=1)  # (B, k_run, D)
    if hidden_t.shape[1] < steps:  # all rows stopped early: pad with each row's frozen mean
        pad = (running / hidden_t.shape[1]).to(hidden_t.dtype)[:, None].expand(-1, steps - hidden_t.shape[1], -1)
        hidden_t = torch.cat([hidden_t, pad], dim=1)
    result = SoftTokenOutput(hidden=hidden_t, steps_used=steps_used)
    if top:
        result.top_ids = torch.stack([t[0] for t in tops], dim=1)
        result.top_probs = torch.stack([t[1] for t in tops], dim=1)
    return result


def with_prefix_mask(attention_mask: torch.Tensor, prefix: PrefixStates) -> torch.Tensor:
    """The attention mask over a prefix and the left-padded tokens after it, ``(B, P + T)``: the padding
    sits between the prefix and each row's tokens, and positions (``cumsum(mask) - 1``) run on from P."""
    lengths = attention_mask.sum(dim=1)
    if int(lengths.min()) < 1:
        raise ValueError("every prompt needs at least one token after its prefix")
    return torch.cat([attention_mask.new_ones((attention_mask.shape[0], prefix.length)), attention_mask], dim=1)


def _recompute_last(
    model: Any, prompt_embeds: torch.Tensor, attention_mask: torch.Tensor, soft: list[torch.Tensor], attention: str
) -> torch.Tensor:
    """Full forward over prompt + soft tokens so far; the last position's hidden state ``(B, D)``."""
    if soft:
        embeds = torch.cat([prompt_embeds, torch.stack(soft, dim=1)], dim=1)
        mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], len(soft)))], dim=1)
    else:
        embeds, mask = prompt_embeds, attention_mask
    if attention != "causal":
        raise ValueError("the recompute path supports only causal attention")
    out = run_decoder(model, inputs_embeds=embeds, attention_mask=mask, attention=attention)
    return out.last_hidden_state[:, -1]
