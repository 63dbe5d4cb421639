"""Chat generation with the embedding model's weights: the backbone's chat template, causal attention.

``generate_pieces`` renders the conversation, decodes with :func:`~genembed.generation.decoding.decode_stream`
and turns the ids into text pieces (see :mod:`genembed.generation.detokenize`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, Unpack

import torch

from .adapters import adapter_mode, each_step_in
from .decoding import decode_stream
from .detokenize import stream_pieces
from .sampling import SamplingKwargs, SamplingOptions

__all__ = ["Messages", "chat_prompt_ids", "eos_token_ids", "generate_pieces", "validate_messages"]

Messages = str | Sequence[dict]
_ROLES = ("system", "user", "assistant", "tool")


def validate_messages(messages_or_prompt: Messages) -> list[dict]:
    """A prompt string becomes one user turn; a list of ``{"role", "content"}`` dicts is checked.

    Raises:
        TypeError / ValueError: naming the bad message's index and field.
    """
    if isinstance(messages_or_prompt, str):
        return [{"role": "user", "content": messages_or_prompt}]
    if not isinstance(messages_or_prompt, Sequence) or not messages_or_prompt:
        raise TypeError(
            f"messages_or_prompt must be a string or a non-empty list of {{'role', 'content'}} dicts, "
            f"got {type(messages_or_prompt).__name__}"
        )
    messages = []
    for i, message in enumerate(messages_or_prompt):
        if not isinstance(message, dict):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}]['role'] must be one of {_ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
        messages.append({"role": role, "content": content})
    return messages


def chat_prompt_ids(tokenizer: Any, messages_or_prompt: Messages, prompt_format: str | None = None) -> list[int]:
    """Token ids of the conversation rendered by the tokenizer's chat template, ending with the
    assistant's generation prompt. Templates may insert their default system prompt (SmolLM2 does
    when the conversation has no system turn): that is the setting the model was tuned in.

    A tokenizer without a chat template takes a plain prompt string as it is. With
    ``prompt_format="gritlm"`` the conversation is in GritLM's format instead
    (``<|user|>\\n{prompt}\\n<|assistant|>\\n``, :func:`~genembed.encoders.prompts.gritlm_conversation`),
    tokenized with the tokenizer's special tokens as GritLM does.
    """
    messages = validate_messages(messages_or_prompt)
    if prompt_format == "gritlm":
        from ..encoders.prompts import gritlm_conversation

        return tokenizer(gritlm_conversation(messages, tokenizer.eos_token))["input_ids"]
    if not getattr(tokenizer, "chat_template", None):
        if isinstance(messages_or_prompt, str):
            return tokenizer(messages_or_prompt, add_special_tokens=False)["input_ids"]
        raise ValueError("this tokenizer has no chat template: pass a plain prompt string instead of messages")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def eos_token_ids(backbone: Any) -> frozenset[int]:
    """Ids that end a reply: the tokenizer's EOS and the generation config's EOS id(s)."""
    ids = {backbone.tokenizer.eos_token_id}
    config_eos = getattr(getattr(backbone.model, "generation_config", None), "eos_token_id", None)
    ids.update(config_eos if isinstance(config_eos, list | tuple | set) else [config_eos])
    return frozenset(int(i) for i in ids if i is not None)


def generate_pieces(
    backbone: Any,
    messages_or_prompt: Messages,
    *,
    sampling: SamplingOptions | None = None,
    use_adapter: bool | str = True,
    prompt_format: str | None = None,
    **options: Unpack[SamplingKwargs],
) -> Iterator[str]:
    """Text pieces of the assistant's reply, produced lazily.

    Args:
        backbone: the loaded model and tokenizer.
        messages_or_prompt: a user prompt, or a conversation as ``[{"role": ..., "content": ...}]``.
        sampling: how tokens are picked (None: the defaults of
            :class:`~genembed.generation.sampling.SamplingOptions`), changed by ``options``, its keywords
            (``max_new_tokens``, ``temperature``, ``top_p``, ``seed``, ``repetition_penalty``, ``stop``, ...).
        use_adapter: run with the peft adapter (if any) enabled, or with the named one (a generation
            adapter); see :mod:`genembed.generation.adapters`.
        prompt_format: the embedding prompt format of the model; ``"gritlm"`` chats in GritLM's format
            (:func:`chat_prompt_ids`), any other in the tokenizer's chat template.

    Raises:
        ValueError / TypeError: bad messages or settings, or a prompt longer than the model's context
            (raised when the call is made, before any piece).
    """
    sampling = SamplingOptions.build(sampling, **options)
    model, tokenizer = backbone.model, backbone.tokenizer
    ids = chat_prompt_ids(tokenizer, messages_or_prompt, prompt_format)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit is not None and len(ids) >= limit:
        raise ValueError(f"the prompt has {len(ids)} tokens; the model's context holds {limit}")
    if limit is not None:  # the reply ends where the context does
        sampling = SamplingOptions.build(sampling, max_new_tokens=min(sampling.max_new_tokens, limit - len(ids)))
    device = next(model.parameters()).device
    tokens = decode_stream(
        model,
        torch.tensor([ids], dtype=torch.long, device=device),
        sampling=sampling,
        eos_token_ids=eos_token_ids(backbone),
    )
    tokens = each_step_in(functools.partial(adapter_mode, model, use_adapter), tokens)
    return stream_pieces(tokenizer, tokens, list(sampling.stop))
