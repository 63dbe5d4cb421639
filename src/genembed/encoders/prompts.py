"""How an instruction and a text become token ids: the one place prompt formats live.

``plain`` and ``chat`` prompts are three token spans, tokenized separately and concatenated:

    prefix(instruction) + text + suffix

so we know exactly which tokens are the text (pooled by ``mean``/``grit``) and which are the
instruction and template (attended to, never pooled). The formats of published models
(``gircse``, ``gritlm``) are tokenized the way their authors' code does it, as one string, so that
the ids equal theirs (a split at the text boundary can change the ids there). Formats:

- ``plain``: ``f"{instruction}\\n{text}"``, or just ``text`` when the instruction is empty.
- ``chat``: the backbone's own chat template around an empty system turn (so no long default
  system prompt is inserted) and a user turn holding ``instruction\\ntext``, ending with the
  assistant generation prompt, so generative methods (``gircse``) continue as the assistant would.
  For SmolLM2 that is
  ``<|im_start|>system\\n<|im_end|>\\n<|im_start|>user\\n{instruction}\\n{text}<|im_end|>\\n<|im_start|>assistant\\n``.
- ``gircse``: the official GIRCSE code's (github.com/Roytsai27/GIRCSE): ``f"Instruct: {instruction}\\nQuery:{text}"``
  (no space after ``Query:``), or just ``text`` when the instruction is empty; the whole string is
  tokenized without special tokens. The text tokens are found from the tokenizer's character offsets.
- ``gritlm``: GritLM's (github.com/ContextualAI/gritlm): ``f"<|user|>\\n{instruction}\\n<|embed|>\\n{text}"``,
  or ``f"<|embed|>\\n{text}"`` without an instruction, tokenized whole with the tokenizer's special
  tokens (its BOS, for Mistral). As GritLM does, the first ``len(tokenize(prefix))`` tokens (special
  tokens included) are the instruction, and every token after them (an EOS the tokenizer adds too)
  is the text.
- ``e5``: e5-mistral-7b-instruct's and gte-Qwen2-instruct's: ``f"Instruct: {instruction}\\nQuery: {text}"``
  (a space after ``Query:``), or just ``text`` without an instruction, tokenized whole with the
  tokenizer's special tokens (Mistral's BOS) and ending with the tokenizer's EOS (appended after the
  string is cut at ``max_length - 1`` tokens when the tokenizer does not add it itself), the token their
  last-token pooling reads.
- ``qwen3-embedding``: Qwen3-Embedding's: ``f"Instruct: {instruction}\\nQuery:{text}"`` (no space), or just
  ``text``, ending with ``<|endoftext|>`` (appended when the tokenizer does not add it).
- ``llm2vec``: the llm2vec package's (github.com/McGill-NLP/llm2vec): ``f"{instruction.strip()} {text}"``,
  or just ``text``, tokenized whole with special tokens (BOS); the text is the last
  ``len(tokenize(text))`` tokens (tokenized alone, no special tokens), as llm2vec's ``embed_mask`` marks
  them, so mean pooling leaves the instruction out.

Texts longer than ``max_length`` tokens (prefix and suffix included) have their text span cut
from the end; the instruction and template are always kept whole (``gircse`` and ``gritlm`` cut the
whole string at ``max_length`` tokens, as their authors' code does). An empty text is pooled over the whole
prompt (its instruction and template), or, when even those are empty, over one EOS token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .defaults import DEFAULT_MAX_LENGTH

__all__ = [
    "PROMPT_FORMATS",
    "SENTINEL",
    "WHOLE_STRING_FORMATS",
    "EncodedPrompt",
    "encode_prompts",
    "gritlm_conversation",
    "prompt_spans",
    "split_around",
    "tokenize",
    "split_ids",
]


@dataclass(frozen=True)
class WholeStringFormat:
    """A published model's prompt, tokenized as one string the way its authors' code does."""

    prefix: str  # before the text when there is an instruction (holds "{instruction}")
    bare: str  # before the text when there is none
    special_tokens: bool  # tokenize with the tokenizer's special tokens (a BOS, an EOS it adds)
    text: str  # where the text tokens are: "offsets" (from the character offsets), "after_prefix"
    # (after len(tokenize(prefix)) tokens, as GritLM counts) or "tail" (the last len(tokenize(text)))
    end: str | None = None  # the token every prompt ends with ("eos": the tokenizer's EOS); None: none
    strip_instruction: bool = False  # the instruction is stripped of surrounding whitespace first

    def prefix_for(self, instruction: str) -> str:
        """The string before the text."""
        instruction = instruction.strip() if self.strip_instruction else instruction
        return self.prefix.format(instruction=instruction) if instruction else self.bare


# formats tokenized as one string, the way their authors' code does
WHOLE_STRING_FORMATS: dict[str, WholeStringFormat] = {
    "gircse": WholeStringFormat("Instruct: {instruction}\nQuery:", "", special_tokens=False, text="offsets"),
    "gritlm": WholeStringFormat(
        "<|user|>\n{instruction}\n<|embed|>\n", "<|embed|>\n", special_tokens=True, text="after_prefix"
    ),
    "e5": WholeStringFormat("Instruct: {instruction}\nQuery: ", "", special_tokens=True, text="offsets", end="eos"),
    "qwen3-embedding": WholeStringFormat(
        "Instruct: {instruction}\nQuery:", "", special_tokens=True, text="offsets", end="<|endoftext|>"
    ),
    "llm2vec": WholeStringFormat("{instruction} ", "", special_tokens=True, text="tail", strip_instruction=True),
}
PROMPT_FORMATS = ("plain", "chat", *WHOLE_STRING_FORMATS)
# GritLM's chat turns (its tokenizer's Zephyr-style template); assistant turns end with EOS
_GRITLM_TURNS = {"system": "<|system|>\n", "user": "<|user|>\n", "assistant": "<|assistant|>\n"}
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
    if prompt_format in WHOLE_STRING_FORMATS:
        return WHOLE_STRING_FORMATS[prompt_format].prefix_for(instruction), ""
    raise ValueError(f"prompt format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")


def gritlm_conversation(messages: list[dict], eos_token: str | None) -> str:
    """A conversation in GritLM's generation format, ending with the assistant's generation prompt.

    One user turn gives ``"<|user|>\\n{prompt}\\n<|assistant|>\\n"``; assistant turns end with
    ``eos_token``. Tokenize it with the tokenizer's special tokens (GritLM's BOS), as GritLM does.

    Raises:
        ValueError: a role GritLM has no turn for (such as ``"tool"``).
    """
    parts = []
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in _GRITLM_TURNS:
            raise ValueError(f"messages[{i}]: GritLM's format has no {role!r} turn (only {tuple(_GRITLM_TURNS)})")
        end = (eos_token or "") if role == "assistant" else ""
        parts.append(f"{_GRITLM_TURNS[role]}{message['content']}{end}\n")
    return "".join(parts) + _GRITLM_TURNS["assistant"]


def split_around(
    tokenizer: Any,
    content: str,
    *,
    system_turn: bool = False,
    plain_end: str | None = None,
    prompt_format: str | None = None,
) -> tuple[str, str]:
    """The prompt text before and after :data:`SENTINEL`, which ``content`` holds once, when ``content`` is
    the user turn of the tokenizer's chat template followed by the assistant's generation prompt.

    Args:
        tokenizer: a tokenizer, usually with a chat template.
        content: the user turn, holding :data:`SENTINEL` where the text (or document) goes.
        system_turn: open with an empty system turn, which keeps templates from inserting a long default
            system prompt (templates without a system role get none).
        plain_end: without a chat template the prompt is ``content + plain_end``; None: a ValueError.
        prompt_format: ``"gritlm"`` renders GritLM's turn (:func:`gritlm_conversation`) instead of the
            tokenizer's template (tokenize the part before the text with special tokens, as GritLM does).
    """
    if prompt_format == "gritlm":
        rendered = gritlm_conversation([{"role": "user", "content": content}], tokenizer.eos_token)
    elif getattr(tokenizer, "chat_template", None):
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


def split_ids(tokenizer: Any, before: str, after: str, *, special: bool = False) -> tuple[list[int], list[int]]:
    """Token ids of the two parts of a prompt around its text (each tokenized alone, no special tokens;
    ``special``: the first part with the tokenizer's special tokens, e.g. a BOS, as GritLM tokenizes)."""
    first = tokenizer(before, add_special_tokens=special)["input_ids"]
    return list(first), list(tokenizer(after, add_special_tokens=False)["input_ids"])


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
    max_length: int = DEFAULT_MAX_LENGTH,
) -> list[EncodedPrompt]:
    """Tokenize texts with an instruction and format; truncate each text to fit ``max_length``."""
    if prompt_format in WHOLE_STRING_FORMATS:
        return _encode_whole(tokenizer, texts, instruction or "", prompt_format, max_length)
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


def tokenize(tokenizer: Any, texts: list[str], instruction: str, settings: Any) -> list[EncodedPrompt]:
    """The texts' prompts as ``settings`` (an :class:`~genembed.encoders.settings.EmbedSettings`) build them:
    in its prompt format, each cut to its ``max_length`` (:func:`encode_prompts`)."""
    return encode_prompts(
        tokenizer, texts, instruction=instruction, prompt_format=settings.prompt_format, max_length=settings.max_length
    )


def _encode_whole(
    tokenizer: Any, texts: list[str], instruction: str, prompt_format: str, max_length: int
) -> list[EncodedPrompt]:
    """Prompts tokenized as whole strings (``prefix + text``), as the format's authors do it."""
    form = WHOLE_STRING_FORMATS[prompt_format]
    prefix = form.prefix_for(instruction)
    if not texts:
        return []
    end = _end_token(tokenizer, form.end, prompt_format)
    call = {"add_special_tokens": form.special_tokens, "truncation": True, "max_length": max_length}
    strings = [prefix + text for text in texts]
    if form.text == "after_prefix":  # GritLM: the instruction is the first len(tokenize(prefix)) tokens
        encoded = tokenizer(strings, **call)
        starts = [len(tokenizer(prefix, **call)["input_ids"])] * len(texts)
    elif form.text == "tail":  # llm2vec: the last len(tokenize(text)) tokens are the text
        encoded = tokenizer(strings, **call)
        alone = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=max_length)["input_ids"]
        starts = [max(len(ids) - len(own), 0) for ids, own in zip(encoded["input_ids"], alone, strict=True)]
    else:  # the text starts at the first token that ends inside it
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"prompt format {prompt_format!r} needs a fast (tokenizers) tokenizer for its offsets")
        encoded = tokenizer(strings, return_offsets_mapping=True, **call)
        offsets = encoded["offset_mapping"]
        starts = [next((i for i, (_, stop) in enumerate(o) if stop > len(prefix)), len(o)) for o in offsets]
    out = []
    for ids, start in zip(encoded["input_ids"], starts, strict=True):
        ids = list(ids)
        stop = len(ids)
        if end is not None:  # the prompt ends with the end token: appended after a cut at max_length - 1
            if not ids or ids[-1] != end:
                ids = [*ids[: max_length - 1], end]
            stop = len(ids) - 1
        ids = ids or [tokenizer.eos_token_id]  # an empty prompt: one EOS token stands in
        start = min(start, stop)
        out.append(EncodedPrompt(ids, start, max(stop, start)))
    return out


def _end_token(tokenizer: Any, end: str | None, prompt_format: str) -> int | None:
    """The id of a format's end token (None: the format has none).

    Raises:
        ValueError: the tokenizer has no such token.
    """
    if end is None:
        return None
    if end == "eos":
        if tokenizer.eos_token_id is None:
            raise ValueError(f"prompt format {prompt_format!r} ends with the EOS token; this tokenizer has none")
        return int(tokenizer.eos_token_id)
    token = tokenizer.convert_tokens_to_ids(end)
    if token is None or token == tokenizer.unk_token_id:
        raise ValueError(f"prompt format {prompt_format!r} ends with {end!r}, which this tokenizer does not have")
    return int(token)
