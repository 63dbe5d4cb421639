"""How an instruction and a text become token ids: the one place prompt formats live.

Every prompt is three token spans, tokenized separately and concatenated:

    prefix(instruction) + text + suffix

so we know exactly which tokens are the text (pooled by ``mean``/``grit``) and which are the
instruction and template (attended to, never pooled). Formats:

- ``plain``: ``f"{instruction}\\n{text}"``, or just ``text`` when the instruction is empty.
- ``chat``: the backbone's own chat template around an empty system turn (so no long default
  system prompt is inserted) and a user turn holding ``instruction\\ntext``, ending with the
  assistant generation prompt, so generative methods (``gircse``) continue as the assistant would.
  For SmolLM2 that is
  ``<|im_start|>system\\n<|im_end|>\\n<|im_start|>user\\n{instruction}\\n{text}<|im_end|>\\n<|im_start|>assistant\\n``.

Texts longer than ``max_length`` tokens (prefix and suffix included) have their text span cut
from the end; the instruction and template are always kept whole. An empty text is pooled over the whole
prompt (its instruction and template), or, when even those are empty, over one EOS token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["PROMPT_FORMATS", "SENTINEL", "EncodedPrompt", "encode_prompts", "prompt_spans", "split_around", "split_ids"]

PROMPT_FORMATS = ("plain", "chat")
SENTINEL = "\u2063GENEMBED_TEXT\u2063"  # stands for the text while a template is rendered around it


@dataclass(frozen=True)
class EncodedPrompt:
    """Token ids of one prompt and the half-open span ``[text_start, text_end)`` of the text tokens."""

    ids: list[int]
    text_start: int
    text_end: int


def prompt_spans(tokenizer: Any, instruction: str, prompt_format: str) -> tuple[str, str]:
    """The (prefix, suffix) strings around a text for this instruction and format."""
    if prompt_format == "plain":
        return (f"{instruction}\n" if instruction else ""), ""
    if prompt_format == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("prompt format 'chat' needs a tokenizer with a chat template; use 'plain'")
        content = f"{instruction}\n{SENTINEL}" if instruction else SENTINEL
        return split_around(tokenizer, content, system_turn=True)
    raise ValueError(f"prompt format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")


def split_around(
    tokenizer: Any, content: str, *, system_turn: bool = False, plain_end: str | None = None
) -> tuple[str, str]:
    """The prompt text before and after :data:`SENTINEL`, which ``content`` holds once, when ``content`` is
    the user turn of the tokenizer's chat template followed by the assistant's generation prompt.

    Args:
        tokenizer: a tokenizer, usually with a chat template.
        content: the user turn, holding :data:`SENTINEL` where the text (or document) goes.
        system_turn: open with an empty system turn, which keeps templates from inserting a long default
            system prompt (templates without a system role get none).
        plain_end: without a chat template the prompt is ``content + plain_end``; None: a ValueError.
    """
    if getattr(tokenizer, "chat_template", None):
        user = [{"role": "user", "content": content}]
        rendered = None
        if system_turn:
            try:
                messages = [{"role": "system", "content": ""}, *user]
                rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            except Exception:  # templates without a system role
                rendered = None
        if rendered is None:
            rendered = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    elif plain_end is not None:
        rendered = content + plain_end
    else:
        raise ValueError("this prompt needs a tokenizer with a chat template")
    before, _, after = rendered.partition(SENTINEL)
    return before, after


def split_ids(tokenizer: Any, before: str, after: str) -> tuple[list[int], list[int]]:
    """Token ids of the two parts of a prompt around its text (each tokenized alone, no special tokens)."""
    ids = tokenizer([before, after], add_special_tokens=False)["input_ids"]
    return list(ids[0]), list(ids[1])


@lru_cache(maxsize=256)
def _span_ids(tokenizer: Any, instruction: str, prompt_format: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    prefix, suffix = split_ids(tokenizer, *prompt_spans(tokenizer, instruction, prompt_format))
    return tuple(prefix), tuple(suffix)


def encode_prompts(
    tokenizer: Any,
    texts: list[str],
    *,
    instruction: str = "",
    prompt_format: str = "plain",
    max_length: int = 512,
) -> list[EncodedPrompt]:
    """Tokenize texts with an instruction and format; truncate each text to fit ``max_length``."""
    prefix, suffix = _span_ids(tokenizer, instruction or "", prompt_format)
    room = max_length - len(prefix) - len(suffix)
    if room < 1:
        raise ValueError(
            f"max_length={max_length} leaves no room for the text after the instruction and template "
            f"({len(prefix) + len(suffix)} tokens)"
        )
    text_ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    encoded = []
    for ids in text_ids:
        ids = ids[:room]
        if not (prefix or ids or suffix):  # an empty text with no template: one EOS token stands in
            ids = [tokenizer.eos_token_id]
        start = len(prefix)
        encoded.append(EncodedPrompt([*prefix, *ids, *suffix], start, start + len(ids)))
    return encoded
