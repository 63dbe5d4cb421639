"""Self-generated generative data: the base model answers prompts, and the answers become training data.

Joint (GRIT) training needs generative data so the model keeps its ability to chat; the model's own
answers to the training queries keep it close to what it already does, without outside chat data:

    genembed make-gen-data ../shared/data/train/*.jsonl --out runs/selfgen.jsonl --limit 2000

Prompts are read from contrastive files (``query``), prompt files (``prompt`` or ``text``) or plain
text (one per line), de-duplicated, shuffled with the seed, and cut to ``limit`` after skipping
``offset`` (a held-aside split). Prompts are rendered as the chat mode renders them
(:func:`genembed.generation.chat.chat_prompt_ids`) and answered in batches with transformers'
``generate``. The output is written to ``OUT.partial`` as it goes (a rerun
continues after the last finished batch) and renamed to ``OUT`` when complete.

With ``--rag`` the prompts are questions with passages, laid out as ``genembed ask`` lays them out
(:meth:`genembed.generation.rag_prompt.RagPrompt.prompt_ids`), so that joint training keeps the base
weights' answers from passages, not only their chat:

    genembed make-gen-data ../shared/data/train/{covidqa,medquad,pubmedqa,trecqa}.jsonl --rag \
        --out runs/selfgen-rag.jsonl --limit 600

Each contrastive row gives one question (``query``): its first positive and ``top_k - 1`` distractors
(the row's own negatives first, then positives of other rows of the same file, drawn with the seed),
each cut to ``passage_tokens`` tokens, in a seeded order, as a retriever's top ``k`` would hold them.
The rows written are ``{"passages", "question", "response"}``
(:mod:`genembed.training.data.generative`).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._files import atomic_write_text, publish_file
from ..generation.chat import chat_prompt_ids, eos_token_ids
from ..generation.rag_prompt import RagPrompt
from .data.jsonl import DataError, iter_jsonl

__all__ = ["RagItem", "generate_responses", "read_prompts", "read_rag_items"]


@dataclass(frozen=True)
class RagItem:
    """A question to answer from ``passages`` (in prompt order), as ``genembed ask`` would put them."""

    question: str
    passages: tuple[str, ...]

    def row(self, response: str) -> dict[str, Any]:
        """The generative training row of this item answered with ``response``."""
        return {"passages": list(self.passages), "question": self.question, "response": response}


def read_rag_items(
    paths: Sequence[str | os.PathLike], tokenizer: Any, *, top_k: int = 3, passage_tokens: int = 160, seed: int = 0
) -> list[RagItem]:
    """One :class:`RagItem` per contrastive row with a question and a positive, in file order (a
    question met twice is kept once): the first positive and ``top_k - 1`` distractors (the row's
    negatives first, then other rows' positives of the same file, drawn with ``seed``), each cut to its
    first ``passage_tokens`` tokens, shuffled with ``seed``.

    Raises:
        DataError: a line without a non-empty ``query`` or ``pos`` (naming file, line and field).
        ValueError: ``top_k`` or ``passage_tokens`` below 1.
    """
    if top_k < 1 or passage_tokens < 1:
        raise ValueError(f"top_k and passage_tokens must be >= 1, got {top_k} and {passage_tokens}")
    rng = random.Random(seed)
    items: dict[str, RagItem] = {}
    for path in map(Path, paths):
        rows = []
        for line, obj in iter_jsonl(path):
            query, pos = obj.get("query"), obj.get("pos")
            if not isinstance(query, str) or not query.strip():
                raise DataError(path, line, "missing or empty field 'query'")
            if not isinstance(pos, list) or not pos or not isinstance(pos[0], str) or not pos[0].strip():
                raise DataError(path, line, "field 'pos' must be a non-empty list of strings")
            rows.append((query.strip(), pos[0], [n for n in obj.get("neg") or [] if isinstance(n, str) and n.strip()]))
        for n, (question, gold, negatives) in enumerate(rows):
            others = [rows[i][1] for i in rng.sample(range(len(rows)), min(len(rows), top_k + 1)) if i != n]
            passages = [gold, *[p for p in [*negatives, *others] if p != gold][: top_k - 1]]
            rng.shuffle(passages)
            items.setdefault(question, RagItem(question, tuple(_cut(tokenizer, p, passage_tokens) for p in passages)))
    return list(items.values())


def _cut(tokenizer: Any, text: str, tokens: int) -> str:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text.strip() if len(ids) <= tokens else tokenizer.decode(ids[:tokens]).strip()


_PROMPT_FIELDS = ("query", "prompt", "text")


def read_prompts(paths: Sequence[str | os.PathLike], *, field: str | None = None) -> list[str]:
    """Unique prompts, in file order, from JSONL files (``field``, else the first of ``query``, ``prompt``,
    ``text``) or ``.txt`` files (one prompt per non-blank line).

    Raises:
        DataError: a JSONL line without the field (naming file, line and field).
    """
    prompts: dict[str, None] = {}
    for path in map(Path, paths):
        if path.suffix == ".txt":
            if not path.is_file():
                raise DataError(path, None, "file not found")
            lines = path.read_text(encoding="utf-8").splitlines()
            prompts.update((line.strip(), None) for line in lines if line.strip())
            continue
        for line, obj in iter_jsonl(path):
            key = field or next((k for k in _PROMPT_FIELDS if k in obj), None)
            value = obj.get(key) if key else None
            if not isinstance(value, str) or not value.strip():
                wanted = field or " or ".join(_PROMPT_FIELDS)
                raise DataError(path, line, f"missing or empty field {wanted!r}")
            prompts[value.strip()] = None
    return list(prompts)


@torch.inference_mode()
def generate_responses(
    backbone: Any,
    prompts: Sequence[str | RagItem],
    out: str | os.PathLike,
    *,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    limit: int | None = None,
    offset: int = 0,
    no_repeat_ngram_size: int = 0,
    progress: bool = True,
) -> Path:
    """Answer ``prompts`` with the model and write ``{"prompt", "response"}`` lines to ``out``.

    Args:
        backbone: the loaded model and tokenizer (e.g. ``genembed.load().backbone``).
        prompts: the prompts (chat prompts, or questions with passages, :func:`read_rag_items`);
            shuffled with ``seed`` and cut to ``limit``.
        out: the generative JSONL to write.
        max_new_tokens: the longest answer in tokens.
        batch_size: prompts answered together.
        temperature: 0 for greedy decoding; otherwise sampling with ``top_p``.
        seed: prompt order and sampling seed (a resumed run makes the same choices).
        limit: answer at most this many prompts.
        offset: skip this many shuffled prompts first; with the same ``seed``, ``offset=N`` gives prompts
            disjoint from a run with ``limit=N`` (a held-aside split).
        no_repeat_ngram_size: no n-gram of this size twice in an answer (0: off; ``genembed ask``'s
            decoding uses it).
        progress: show a progress bar.

    Returns:
        The path of the finished file. Prompts whose answer is empty are left out.
    """
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(f"max_new_tokens and batch_size must be >= 1, got {max_new_tokens} and {batch_size}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    order = np.random.default_rng(seed).permutation(len(prompts))
    stop = len(prompts) if limit is None else offset + limit
    chosen = [prompts[i] for i in order[offset:stop]]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    start = _resume_point(partial, chosen, batch_size)
    model, tokenizer = backbone.model.eval(), backbone.tokenizer
    device = next(model.parameters()).device
    from tqdm.auto import tqdm

    bar = tqdm(total=len(chosen), initial=start, desc="generate", unit="prompt", disable=not progress)
    decoding = {"temperature": temperature, "top_p": top_p, "no_repeat_ngram_size": no_repeat_ngram_size}
    with partial.open("a" if start else "w", encoding="utf-8") as handle:
        for begin in range(start, len(chosen), batch_size):
            batch = chosen[begin : begin + batch_size]
            torch.manual_seed(seed + begin)
            answers = _answer(model, backbone, tokenizer, batch, device, max_new_tokens, **decoding)
            for prompt, answer in zip(batch, answers, strict=True):
                if answer:
                    handle.write(json.dumps(_row(prompt, answer), ensure_ascii=False) + "\n")
            handle.flush()
            bar.update(len(batch))
    bar.close()
    publish_file(partial, out)
    return out


def _row(prompt: str | RagItem, answer: str) -> dict[str, Any]:
    return prompt.row(answer) if isinstance(prompt, RagItem) else {"prompt": prompt, "response": answer}


def _key(row: dict[str, Any]) -> str | RagItem:
    """The prompt a written row answers (what :func:`_resume_point` finds it by)."""
    if "passages" in row:
        return RagItem(row["question"], tuple(row["passages"]))
    return row["prompt"]


def _resume_point(partial: Path, chosen: list[str | RagItem], batch_size: int) -> int:
    """Index of the first prompt to answer again: the start of the batch holding the last written row
    (that batch may have been cut short by a crash, so it is redone). The partial file is cut back to
    the rows before it."""
    if not partial.is_file():
        return 0
    position = {prompt: i for i, prompt in enumerate(chosen)}
    rows: list[tuple[int, str]] = []
    for line in partial.read_text(encoding="utf-8").splitlines():
        try:
            rows.append((position[_key(json.loads(line))], line))
        except (json.JSONDecodeError, KeyError, TypeError):  # a torn line, or another run's prompts
            break
    start = max((i for i, _ in rows), default=0) // batch_size * batch_size
    atomic_write_text(partial, "".join(line + "\n" for i, line in rows if i < start))
    return start


def _answer(
    model, backbone, tokenizer, prompts, device, max_new_tokens, *, temperature, top_p, no_repeat_ngram_size
) -> list[str]:
    rag = RagPrompt()
    ids = [
        rag.prompt_ids(tokenizer, list(p.passages), p.question)
        if isinstance(p, RagItem)
        else chat_prompt_ids(tokenizer, p)
        for p in prompts
    ]
    width = max(map(len, ids))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=device)
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {}
    generated = model.generate(
        input_ids=input_ids,
        attention_mask=mask,
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(eos_token_ids(backbone)),
        pad_token_id=pad,
        do_sample=temperature > 0,
        no_repeat_ngram_size=no_repeat_ngram_size,
        **{k: v for k, v in sampling.items() if k != "do_sample"},
    )
    return [tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in generated]
