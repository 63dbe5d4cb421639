"""The published GIRCSE and GritLM checkpoints and how their authors run them: the one table of them.

``genembed.load(ID)`` with an id of :data:`PUBLISHED` loads the checkpoint with these settings (the
adapter's base model, method, K, temperature, prompt format, instructions); ``genembed models`` lists
them; ``genembed eval`` and :class:`genembed.eval.mteb_model.GenembedMTEBModel` use their per-task
MTEB instructions. Each fact comes from the authors' code (the ``code`` field, at the commit recorded
in the instruction files), not from genembed's own defaults: centering, genembed's idea, stays off.

The per-task instructions are the authors' data, stored with their source, commit and licence in
``genembed/data/instructions_<set>.json`` (written by ``scripts/extract_published_instructions.py``).
A task's entry is either one instruction for every text of the task (STS, classification,
clustering, pair classification) or a ``{"query", "corpus"}`` pair (retrieval, reranking).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..backbone.memory import BYTES_PER_PARAM

__all__ = ["PUBLISHED", "InstructionSet", "PublishedModel", "instruction_set", "published_for", "published_model"]


@dataclass(frozen=True)
class InstructionSet:
    """A published model's per-task instructions (keys: MTEB task names) and where they come from."""

    name: str
    source: dict[str, str]  # repo, path, name, commit, license (and the set, for gritlm)
    instructions: dict[str, str | dict[str, str]]
    remove: tuple[str, ...] = ()  # substrings taken out of a task name before the lookup (".v2")
    prefix_fallback: tuple[tuple[str, str], ...] = ()  # tasks starting with a prefix use another's entry

    def entry(self, task: str) -> str | dict[str, str] | None:
        """The raw entry of ``task`` after the authors' name rules, or None when the set has none."""
        for part in self.remove:
            task = task.replace(part, "")
        for prefix, other in self.prefix_fallback:
            if task.startswith(prefix) and other in self.instructions:
                return self.instructions[other]
        return self.instructions.get(task)

    def for_task(self, task: str, side: str | None = None) -> str | None:
        """The instruction a text of ``task`` gets: ``side`` ``"query"`` or ``"document"`` for the two
        sides of retrieval and reranking, None for a symmetric task. None when the task is not in the set.

        Raises:
            ValueError: ``side`` is not None, ``"query"`` or ``"document"``.
        """
        if side not in (None, "query", "document"):
            raise ValueError(f"side must be None, 'query' or 'document', got {side!r}")
        entry = self.entry(task)
        if entry is None or isinstance(entry, str):
            return entry
        return entry["corpus" if side == "document" else "query"]


@cache
def instruction_set(name: str) -> InstructionSet:
    """The instruction set ``name`` (``"gircse"`` or ``"gritlm"``), read once from the package data.

    Raises:
        ValueError: no such set ships with genembed.
    """
    path = resources.files("genembed") / "data" / f"instructions_{name}.json"
    if not path.is_file():
        raise ValueError(f"no instruction set {name!r} ships with genembed (genembed/data/instructions_{name}.json)")
    data = json.loads(path.read_text(encoding="utf-8"))
    lookup = data.get("lookup", {})
    return InstructionSet(
        name=name,
        source=data["source"],
        instructions=data["instructions"],
        remove=tuple(lookup.get("remove", ())),
        prefix_fallback=tuple(lookup.get("prefix_fallback", {}).items()),
    )


@dataclass(frozen=True)
class PublishedModel:
    """One published checkpoint and the settings its authors run it with."""

    id: str  # the hub id
    summary: str
    method: str  # genembed's embedding method (genembed.encoders.methods)
    prompt_format: str  # genembed's prompt format (genembed.encoders.prompts)
    attention: str  # attention while embedding
    pooling: str  # what is pooled, in words
    steps: int | None  # GIRCSE K at evaluation (None: a single-pass method)
    train_steps: int | None  # GIRCSE K in training
    tau: float  # soft-token softmax temperature
    dtype: str  # the dtype the authors run it in
    base: str | None  # a LoRA adapter's base model (hub id); None: full weights
    architecture: str
    params: int  # parameters of the weights that run (base + nothing: LoRA layers add < 0.6%)
    instructions: str  # the per-task instruction set (instruction_set(name))
    query_instruction: str  # encode_query's instruction: the set's general web-search instruction
    normalize_eval: bool  # whether the authors' MTEB run L2-normalises (classification sees raw vectors if not)
    max_length: int  # tokens per text in the authors' evaluation
    code: str  # the authors' repository the settings come from
    paper: str
    benchmark: str  # the mteb benchmark the authors evaluate on (mteb.get_benchmark name)
    reported: str  # what the authors report on it (not run here)

    @property
    def is_adapter(self) -> bool:
        """Whether the checkpoint is a LoRA adapter on :attr:`base` (else full weights)."""
        return self.base is not None

    def prompts(self) -> dict[str, str | None]:
        """Named instructions for ``encode_query``/``encode_document``: queries get the set's web-search
        instruction, documents none (as in the authors' retrieval evaluation); the rest are the caller's."""
        return {"query": self.query_instruction, "document": "", "classification": None, "clustering": None}

    def instruction_set(self) -> InstructionSet:
        """The authors' per-task MTEB instructions."""
        return instruction_set(self.instructions)

    def weight_bytes(self, dtype: str | None = None) -> int:
        """Bytes the weights take in ``dtype`` (a key of :data:`BYTES_PER_PARAM`; None: :attr:`dtype`).

        An estimate from the parameter count: activations, the KV cache and (for adapters) the LoRA
        layers come on top.
        """
        key = dtype or self.dtype
        if key not in BYTES_PER_PARAM:
            raise ValueError(f"dtype must be one of {sorted(BYTES_PER_PARAM)}, got {dtype!r}")
        return int(self.params * BYTES_PER_PARAM[key])

    def describe(self) -> dict[str, Any]:
        """The entry as plain data (for ``genembed models --json`` and reports)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["weights_gb"] = {dtype: round(self.weight_bytes(dtype) / 1e9, 1) for dtype in BYTES_PER_PARAM}
        return out


_GIRCSE_CODE = "https://github.com/Roytsai27/GIRCSE"
_GIRCSE_PAPER = "https://arxiv.org/abs/2509.24291"
_GRIT_CODE = "https://github.com/ContextualAI/gritlm"
_GRIT_PAPER = "https://arxiv.org/abs/2402.09906"
# the MSMARCO instruction of both sets: what a general search query gets
_WEB_QUERY = "Given a web search query, retrieve relevant passages that answer the query"
# Parameter counts: the architectures' shapes (hidden size, layers, heads, vocabulary, experts) built on
# the meta device; LoRA r=16 on all seven projections (GIRCSE lora.json) adds about 42M (Mistral) / 40M (Qwen).
_MISTRAL_7B, _QWEN25_7B, _MIXTRAL_8X7B = 7_241_732_096, 7_615_616_512, 46_702_792_704
# what both authors' evaluations share: bf16 weights, texts cut at 512 tokens, tau 1 (GIRCSE's; unused by
# GRIT), queries with the MSMARCO instruction
_SHARED: dict[str, Any] = {"tau": 1.0, "dtype": "bfloat16", "max_length": 512, "query_instruction": _WEB_QUERY}


def _gircse(model_id: str, base: str, architecture: str, params: int, reported: str) -> PublishedModel:
    # embedding/mteb_eval.py + scripts/eval_mteb.sh (K=3, T=1, generate_mean), scripts/train.sh (K=5),
    # embedding/base.py (bf16, max_length 512, left padding with EOS, no special tokens, L2-normalised)
    return PublishedModel(
        **_SHARED,
        id=model_id,
        summary=f"GIRCSE LoRA adapter on {base}",
        method="gircse",
        prompt_format="gircse",
        attention="causal",
        pooling="mean of the K soft-token states (generate_mean)",
        steps=3,
        train_steps=5,
        base=base,
        architecture=architecture,
        params=params,
        instructions="gircse",
        normalize_eval=True,
        code=_GIRCSE_CODE,
        paper=_GIRCSE_PAPER,
        benchmark="MTEB(eng, v2)",  # embedding/mteb_eval.py
        reported=reported,
    )


def _gritlm(model_id: str, architecture: str, params: int, reported: str) -> PublishedModel:
    # gritlm/gritlm.py (bidirectional "bbcc", mean over the text only, max_length 512) and
    # evaluation/eval_mteb.py (bf16, the "e5" instructions, normalized=False for MTEB)
    return PublishedModel(
        **_SHARED,
        id=model_id,
        summary=f"GRIT, full weights ({architecture}): embeds and generates",
        method="grit",
        prompt_format="gritlm",
        attention="bidirectional",
        pooling="mean over the text tokens (instruction and template excluded)",
        steps=None,
        train_steps=None,
        base=None,
        architecture=architecture,
        params=params,
        instructions="gritlm",
        normalize_eval=False,
        code=_GRIT_CODE,
        paper=_GRIT_PAPER,
        benchmark="MTEB(eng, v1)",  # evaluation/eval_mteb.py: the 56 English tasks of mteb 1.x
        reported=reported,
    )


PUBLISHED: dict[str, PublishedModel] = {
    entry.id: entry
    for entry in (
        _gircse(
            "Roytsai27/GIRCSE-Mistral7B", "mistralai/Mistral-7B-v0.1", "mistral", _MISTRAL_7B, "MTEB about 67.8 (paper)"
        ),
        _gircse("Roytsai27/GIRCSE-QWEN7B", "Qwen/Qwen2.5-7B", "qwen2", _QWEN25_7B, "see the paper"),
        _gritlm("GritLM/GritLM-7B", "mistral", _MISTRAL_7B, "MTEB 66.8 (gritlm README)"),
        _gritlm("GritLM/GritLM-8x7B", "mixtral", _MIXTRAL_8X7B, "MTEB 65.7 (gritlm README)"),
    )
}


def published_for(model: Any) -> PublishedModel | None:
    """The table entry a loaded model runs: its adapter's (a GIRCSE checkpoint) or its backbone's (GritLM);
    None for other models, and for a published adapter's base loaded without the adapter."""
    return published_model(getattr(model, "adapter", None)) or published_model(model.backbone.name)


def published_model(name: Any) -> PublishedModel | None:
    """The table entry of hub id ``name`` (case-insensitive, as the hub), or None for any other model."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    return next((entry for model_id, entry in PUBLISHED.items() if model_id.lower() == key), None)
