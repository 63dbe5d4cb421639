"""The text of a RAG prompt: a system turn, the passages, the question in a user turn, and the
assistant prompt, cut into segments that can be computed apart (see :mod:`genembed.retrieval.context`).

With SmolLM2's chat template and the default :class:`RagPrompt`::

    head        <|im_start|>system\\n{system}<|im_end|>\\n
    passage     {title} {text}\\n\\n                                      (one per passage)
    doc_first:  [head] [passage 1] ... [passage k] [query] [tail]
        query   <|im_start|>user\\nQuestion: {question}
        tail    <|im_end|>\\n<|im_start|>assistant\\n
    query_first: [head] [query] [passage k] ... [passage 1] [tail]     (the best passage last)
        query   <|im_start|>user\\nQuestion: {question}\\n\\n
        tail    <|im_end|>\\n<|im_start|>assistant\\n

Why this shape (measured with the bundled 135M model on the hand-written extractive set,
benchmarks/data/extractive_qa.jsonl, docs/rag.md): passages as plain text after a system turn and the
question in the user turn below them were copied from most often; every passage in its own user turn,
passages inside the user turn, or the question as plain text with a separate instruction turn all did
worse. The head matters for caching: each passage's stored states are computed after the head, so the
prompt keeps one attention sink at position 0 instead of one at the start of every passage; without
it, cached passages lost a third of the correct answers.

A tokenizer without a chat template gets ``{system}\\n\\n`` as the head, the question as it is, and
``\\nAnswer:`` as the tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ..encoders.prompts import SENTINEL, split_around

__all__ = ["DEFAULT_SYSTEM", "RagPrompt", "passage_order"]

_T = TypeVar("_T")


def passage_order(passages: Sequence[_T], order: str) -> list[_T]:
    """Passages given best first (as retrieved) in the order the prompt holds them: best first when the
    passages come first (``doc_first``: its cached states are exact there), best last, next to the answer,
    when the question comes first (``query_first``: the model copies from the passage nearest the answer;
    querydoc on 15 factual passages answered from the best passage 1 of 5 times with it first, 5 of 5
    with it last; docs/rag.md)."""
    return list(passages)[::-1] if order == "query_first" else list(passages)


DEFAULT_SYSTEM = "Answer the question using only the passages. Reply with the exact words from the passage."


@dataclass(frozen=True)
class RagPrompt:
    """The text around a RAG prompt's segments (stored in an index manifest with its KV states).

    Attributes:
        system: the system message opening the prompt (the head); None for no head at all.
        passage: a passage segment; ``{text}`` is the chunk's ``title + " " + text``.
        question: the question inside the user turn; ``{question}`` is the question.
        chat: put the question in a user turn and end with the assistant prompt (the tokenizer's chat
            template); False: plain text ending in ``\\nAnswer:``.
    """

    system: str | None = DEFAULT_SYSTEM
    passage: str = "{text}\n\n"
    question: str = "Question: {question}"
    chat: bool = True

    def __post_init__(self) -> None:
        if "{text}" not in self.passage:
            raise ValueError(f"RagPrompt.passage must contain '{{text}}', got {self.passage!r}")
        if "{question}" not in self.question:
            raise ValueError(f"RagPrompt.question must contain '{{question}}', got {self.question!r}")

    def head_ids(self, tokenizer: Any) -> list[int]:
        """The head: the system turn (empty when ``system`` is None)."""
        if self.system is None:
            return []
        if self._chat(tokenizer):
            text = tokenizer.apply_chat_template([{"role": "system", "content": self.system}], tokenize=False)
        else:
            text = f"{self.system}\n\n"
        return _ids(tokenizer, text)

    def passage_ids(self, tokenizer: Any, texts: list[str]) -> list[list[int]]:
        """Each passage's segment ids (the template's text and the passage tokenized apart, as
        embedding prompts are, so that an embedding prompt can start with the same tokens)."""
        if not texts:
            return []
        before, after = self.passage.split("{text}", 1)
        body = tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [[*_ids(tokenizer, before), *ids, *_ids(tokenizer, after)] for ids in body]

    def query_ids(self, tokenizer: Any, question: str, order: str) -> list[int]:
        """The query segment: the user turn's opening and the question (plus a blank line before the
        passages in ``query_first`` order)."""
        opening = self._user_turn(tokenizer)[0] if self._chat(tokenizer) else ""
        before, after = self.question.split("{question}", 1)
        gap = "\n\n" if order == "query_first" else ""
        return [*_ids(tokenizer, opening + before), *_ids(tokenizer, question), *_ids(tokenizer, after + gap)]

    @classmethod
    def matching_queries(cls, instruction: str, prompt_format: str) -> RagPrompt:
        """A prompt whose query segment (in ``doc_first`` order) is the start of the query's embedding
        prompt in ``prompt_format`` (``chat``: GIRCSE's default; ``plain``), so that a model embedding
        with its generation weights and causal attention reuses the query's embedding-pass states and
        query caching skips the query's prefill. It has an empty system turn (chat) or no head (plain),
        as embedding prompts do, and answers less well than the default (docs/rag.md).
        """
        question = f"{instruction}\n{{question}}" if instruction else "{question}"
        if prompt_format == "chat":
            return cls(system="", question=question)
        return cls(system=None, question=question, chat=False)

    def tail_ids(self, tokenizer: Any) -> list[int]:
        """The tail: the end of the user turn and the assistant prompt (computed when answering)."""
        return _ids(tokenizer, self._user_turn(tokenizer)[1] if self._chat(tokenizer) else "\nAnswer:")

    def prompt_ids(self, tokenizer: Any, passages: list[str], question: str, order: str = "doc_first") -> list[int]:
        """The whole prompt, computed in one pass (``genembed ask`` without caching): head, passages (given
        best first; :func:`passage_order` places them) and query segment in ``order`` (``"doc_first"`` or
        ``"query_first"``), then the tail. Generative training rows with passages
        (:mod:`genembed.training.data.generative`) are tokenized with it, so the model learns to answer
        the prompt it answers in ``ask``."""
        if order not in ("doc_first", "query_first"):
            raise ValueError(f"order must be 'doc_first' or 'query_first', got {order!r}")
        docs = [i for ids in passage_order(self.passage_ids(tokenizer, passages), order) for i in ids]
        query = self.query_ids(tokenizer, question, order)
        body = [*query, *docs] if order == "query_first" else [*docs, *query]
        return [*self.head_ids(tokenizer), *body, *self.tail_ids(tokenizer)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagPrompt:
        """From :meth:`to_dict` output (as stored in a manifest); unknown keys raise ValueError."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown RAG prompt fields {sorted(unknown)}")
        return cls(**data)

    def _chat(self, tokenizer: Any) -> bool:
        return self.chat and bool(getattr(tokenizer, "chat_template", None))

    def _user_turn(self, tokenizer: Any) -> tuple[str, str]:
        """(opening, closing + assistant prompt) of a user turn, as the chat template renders it after a
        system turn (rendered alone, a user turn would get the template's default system prompt)."""
        before, closing = split_around(tokenizer, SENTINEL, system_turn=True)
        system_only = tokenizer.apply_chat_template([{"role": "system", "content": ""}], tokenize=False)
        return before.removeprefix(system_only), closing


def _ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
