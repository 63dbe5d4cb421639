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

__all__ = ["PROMPT_FORMATS", "EncodedPrompt", "encode_prompts", "prompt_spans"]

PROMPT_FORMATS = ("plain", "chat")
_SENTINEL = "\u2063GENEMBED_TEXT\u2063"


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
        content = f"{instruction}\n{_SENTINEL}" if instruction else _SENTINEL
        user = [{"role": "user", "content": content}]
        try:  # an empty system turn keeps templates from inserting a long default system prompt
            rendered = tokenizer.apply_chat_template(
                [{"role": "system", "content": ""}, *user], tokenize=False, add_generation_prompt=True
            )
        except Exception:  # templates without a system role
            rendered = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        prefix, _, suffix = rendered.partition(_SENTINEL)
        return prefix, suffix
    raise ValueError(f"prompt format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")


@lru_cache(maxsize=256)
def _span_ids(tokenizer: Any, instruction: str, prompt_format: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    prefix, suffix = prompt_spans(tokenizer, instruction, prompt_format)
    ids = tokenizer([prefix, suffix], add_special_tokens=False)["input_ids"]
    return tuple(ids[0]), tuple(ids[1])


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
