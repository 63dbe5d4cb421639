"""Generative training rows and their tokenization with loss labels on the response tokens only.

A line is either a chat, ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}``,
one exchange, ``{"prompt": ..., "response": ...}``, a question answered from passages,
``{"passages": [...], "question": ..., "response": ...}``, or plain text, ``{"text": ...}``. Every assistant
turn is a response whose tokens (including the template's end-of-turn marker) get a next-token loss; the
system and user turns and the template around them are context only. Plain text is read bare (no
template, no special tokens) and every token after the first is learned.

A row with passages is laid out as ``genembed ask`` lays out its prompt, token for token
(:meth:`genembed.generation.rag_prompt.RagPrompt.prompt_ids`: the system turn, the passages as plain text,
the question in a user turn, the assistant prompt), so the model learns to answer from passages in the
prompt it answers in. ``genembed make-gen-data --rag`` writes such rows.

Conversations are rendered exactly as given, as :mod:`genembed.generation.chat` renders them when the
model chats: a template that inserts a default system prompt (SmolLM2's does) inserts it here too,
so the model learns in the setting it generates in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .jsonl import DataError, iter_jsonl, require_string

__all__ = [
    "GenerativeBatch",
    "GenerativeRow",
    "collate_generative",
    "read_generative",
    "render_chat",
    "tokenize_chat",
    "tokenize_rag",
    "tokenize_row",
]

_ROLES = ("system", "user", "assistant")
IGNORE = -100


@dataclass(frozen=True)
class GenerativeRow:
    """One conversation, ``messages`` as ``(role, content)`` pairs with at least one from the assistant, or
    one plain ``text`` (then ``messages`` is empty). A question answered from ``passages`` holds the
    question as its user turn and the answer as its assistant turn."""

    messages: tuple[tuple[str, str], ...]
    text: str | None = None
    passages: tuple[str, ...] | None = None


def read_generative(path: str | Path) -> list[GenerativeRow]:
    """Read and validate a generative JSONL file (chat ``messages`` or ``prompt``/``response``).

    Raises:
        DataError: naming the file, the line number and the field.
    """
    rows = []
    for line, obj in iter_jsonl(path):
        if "messages" in obj:
            if set(obj) != {"messages"}:
                extra = sorted(set(obj) - {"messages"})[0]
                raise DataError(path, line, f"unknown field {extra!r} next to 'messages'")
            rows.append(GenerativeRow(_messages(obj["messages"], path, line)))
        elif "passages" in obj:
            rows.append(_rag_row(obj, path, line))
        elif "prompt" in obj or "response" in obj:
            unknown = sorted(set(obj) - {"prompt", "response"})
            if unknown:
                raise DataError(path, line, f"unknown field {unknown[0]!r} (expected 'prompt' and 'response')")
            prompt = require_string(obj, "prompt", path, line)
            response = require_string(obj, "response", path, line)
            rows.append(GenerativeRow((("user", prompt), ("assistant", response))))
        elif "text" in obj:
            unknown = sorted(set(obj) - {"text"})
            if unknown:
                raise DataError(path, line, f"unknown field {unknown[0]!r} next to 'text'")
            text = require_string(obj, "text", path, line)
            if not text.strip():
                raise DataError(path, line, "field 'text' is empty")
            rows.append(GenerativeRow((), text=text))
        else:
            raise DataError(path, line, "missing field 'messages' (or 'prompt' and 'response', 'passages', or 'text')")
    return rows


def _rag_row(obj: dict[str, Any], path: str | Path, line: int) -> GenerativeRow:
    unknown = sorted(set(obj) - {"passages", "question", "response"})
    if unknown:
        raise DataError(path, line, f"unknown field {unknown[0]!r} (expected 'passages', 'question' and 'response')")
    passages = obj["passages"]
    if not isinstance(passages, list) or not passages:
        raise DataError(path, line, "field 'passages' must be a non-empty list of strings")
    for i, passage in enumerate(passages):
        if not isinstance(passage, str) or not passage.strip():
            raise DataError(path, line, f"field 'passages[{i}]' must be a non-empty string")
    question = require_string(obj, "question", path, line)
    response = require_string(obj, "response", path, line)
    if not response.strip():
        raise DataError(path, line, "field 'response' is empty")
    return GenerativeRow((("user", question), ("assistant", response)), passages=tuple(passages))


def _messages(value: Any, path: str | Path, line: int) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise DataError(path, line, "field 'messages' must be a non-empty list of {role, content} objects")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise DataError(path, line, f"field {where!r} must be an object, got {type(message).__name__}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise DataError(path, line, f"field '{where}.{key}' is missing or not a string")
        if message["role"] not in _ROLES:
            raise DataError(path, line, f"field '{where}.role' must be one of {_ROLES}, got {message['role']!r}")
        if message["role"] == "assistant" and not message["content"].strip():
            raise DataError(path, line, f"field '{where}.content' is an empty assistant response")
        out.append((message["role"], message["content"]))
    if not any(role == "assistant" for role, _ in out):
        raise DataError(path, line, "field 'messages' has no assistant turn to learn from")
    return tuple(out)


def render_chat(tokenizer: Any, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool) -> str:
    """The chat template applied to ``(role, content)`` messages."""
    dicts = [{"role": role, "content": content} for role, content in messages]
    return tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=add_generation_prompt)


def tokenize_row(tokenizer: Any, row: GenerativeRow, max_length: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels of a generative row, cut to ``max_length``: a conversation as
    :func:`tokenize_chat` does it, plain text bare with every token labelled. None when nothing is left to
    learn (no labelled token after the first position)."""
    if row.passages is not None:
        return tokenize_rag(tokenizer, row, max_length)
    if row.text is None:
        return tokenize_chat(tokenizer, row, max_length)
    ids = tokenizer(row.text, add_special_tokens=False)["input_ids"][:max_length]
    return (ids, list(ids)) if len(ids) > 1 else None


def tokenize_chat(tokenizer: Any, row: GenerativeRow, max_length: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels (the ids on response tokens, :data:`IGNORE` elsewhere), cut to ``max_length``.

    Returns None when no response token survives the cut.

    Raises:
        ValueError: the chat template does not render a conversation as a prefix of its continuation.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("generative training needs a tokenizer with a chat template")
    full = render_chat(tokenizer, row.messages, add_generation_prompt=False)
    segments: list[tuple[str, bool]] = []
    done = 0
    for i, (role, _) in enumerate(row.messages):
        if role != "assistant":
            continue
        before = render_chat(tokenizer, row.messages[:i], add_generation_prompt=True) if i else ""
        after = render_chat(tokenizer, row.messages[: i + 1], add_generation_prompt=False)
        if not (full.startswith(after) and after.startswith(before) and len(before) >= done):
            raise ValueError("the chat template does not render conversations prefix-consistently")
        segments += [(full[done : len(before)], False), (after[len(before) :], True)]
        done = len(after)
    segments.append((full[done:], False))
    ids: list[int] = []
    labels: list[int] = []
    for text, is_response in segments:
        if not text:
            continue
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if is_response else [IGNORE] * len(piece)
    ids, labels = ids[:max_length], labels[:max_length]
    # the first token is never predicted, so a response must have a token after position 0
    if not any(label != IGNORE for label in labels[1:]):
        return None
    return ids, labels


def tokenize_rag(tokenizer: Any, row: GenerativeRow, max_length: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels of a question answered from passages: ``genembed ask``'s prompt (passages
    first, :class:`~genembed.generation.rag_prompt.RagPrompt`'s defaults) as context, then the answer and
    the template's end of the assistant turn, labelled. None when the cut to ``max_length`` leaves no
    labelled token (the cut is from the end, as for chats: keep ``max_length`` above the longest row)."""
    from ...generation.rag_prompt import RagPrompt

    (_, question), (_, answer) = row.messages
    prompt = RagPrompt().prompt_ids(tokenizer, list(row.passages or ()), question)
    before = render_chat(tokenizer, row.messages[:1], add_generation_prompt=True)
    after = render_chat(tokenizer, row.messages, add_generation_prompt=False)
    if not after.startswith(before):
        raise ValueError("the chat template does not render conversations prefix-consistently")
    reply = tokenizer(after[len(before) :], add_special_tokens=False)["input_ids"]
    ids, labels = [*prompt, *reply][:max_length], [*([IGNORE] * len(prompt)), *reply][:max_length]
    return (ids, labels) if any(label != IGNORE for label in labels[1:]) else None


@dataclass
class GenerativeBatch:
    """Left-padded ``input_ids``, ``attention_mask`` and ``labels`` (``IGNORE`` off the responses), ``(B, T)``;
    ``text_rows`` ``(B,)`` marks the plain-text rows (None: every row is a conversation)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    text_rows: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> GenerativeBatch:
        rows = None if self.text_rows is None else self.text_rows.to(device)
        return GenerativeBatch(self.input_ids.to(device), self.attention_mask.to(device), self.labels.to(device), rows)


def collate_generative(
    items: Sequence[tuple[list[int], list[int]]], pad_id: int, text_rows: Sequence[bool] | None = None
) -> GenerativeBatch:
    """Left-pad tokenized conversations (the same padding side as the embedding batches); ``text_rows``:
    which items are plain text."""
    width = max(len(ids) for ids, _ in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    for row, (ids, labs) in enumerate(items):
        pad = width - len(ids)
        input_ids[row, pad:] = torch.tensor(ids)
        attention_mask[row, pad:] = 1
        labels[row, pad:] = torch.tensor(labs)
    rows = None if text_rows is None else torch.tensor(list(text_rows), dtype=torch.bool)
    return GenerativeBatch(input_ids, attention_mask, labels, rows)
