"""The published embedders genembed runs exactly as their authors do, and how: the one table of them.

Two kinds of rows: the GIRCSE and GritLM checkpoints (:func:`_gircse`, :func:`_gritlm`), and the
decoder embedders people deploy today (:func:`_family`: Qwen3-Embedding, gte-Qwen2-instruct,
e5-mistral-7b-instruct, LLM2Vec), each a row of data: its prompt format
(:data:`genembed.encoders.prompts.WHOLE_STRING_FORMATS`: the template, special tokens, the end token
its last-token pooling reads), its method (``last``: the last token; ``mean``: the text tokens), its
attention, dimension, Matryoshka dimensions and query instruction. docs/families.md says where each
fact comes from and how it is verified.

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
    instructions: str | None  # the per-task instruction set (instruction_set(name)); None: none published
    query_instruction: str  # encode_query's instruction: the set's general web-search instruction
    normalize_eval: bool  # whether the authors' MTEB run L2-normalises (classification sees raw vectors if not)
    max_length: int  # tokens per text in the authors' evaluation
    code: str  # the authors' repository the settings come from
    paper: str
    benchmark: str  # the mteb benchmark the authors evaluate on (mteb.get_benchmark name)
    reported: str  # what the authors report on it (not run here)
    family: str = ""  # the model family (docs/families.md)
    dim: int = 0  # embedding dimension (the backbone's hidden size)
    matryoshka: tuple[int, int] | None = None  # (smallest, largest) truncate_dim the model was trained for
    contract: str = ""  # the exact embedding contract in words (padding, end token, what is pooled)

    @property
    def is_adapter(self) -> bool:
        """Whether the checkpoint is a LoRA adapter on :attr:`base` (else full weights)."""
        return self.base is not None

    def prompts(self) -> dict[str, str | None]:
        """Named instructions for ``encode_query``/``encode_document``: queries get the set's web-search
        instruction, documents none (as in the authors' retrieval evaluation); the rest are the caller's."""
        return {"query": self.query_instruction, "document": "", "classification": None, "clustering": None}

    def settings(self) -> dict[str, Any]:
        """The settings a model loaded as this checkpoint gets (its authors' method, attention, prompt format,
        named instructions, temperature, K and max length; the fields of
        :class:`~genembed.encoders.model_settings.ModelSettings`), unless the caller says otherwise."""
        own = {"method": self.method, "attention": self.attention, "prompt_format": self.prompt_format}
        own |= {"prompts": self.prompts(), "tau": self.tau} | ({"steps": self.steps} if self.steps else {})
        return own | {"max_length": self.max_length}

    def instruction_set(self) -> InstructionSet:
        """The authors' per-task MTEB instructions (an empty set when they publish none with their code)."""
        if self.instructions is None:
            source = {"repo": self.code, "path": "", "name": "none published", "commit": "", "license": ""}
            return InstructionSet(name=self.id, source=source, instructions={})
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
# embedding checkpoints hold the decoder stack without an LM head (Mistral 7B less its 32000 x 4096 head,
# Llama 3 8B less its 128256 x 4096 head; Qwen3-Embedding: the model cards' counts)
_MISTRAL_7B_STACK, _LLAMA3_8B_STACK = 7_110_660_096, 7_504_924_672
_GTE_1_5B, _GTE_7B = 1_780_000_000, 7_613_000_000  # mteb's ModelMeta of the two (mteb/models/gte_models.py)
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
        family="GIRCSE",
        dim=3584 if architecture == "qwen2" else 4096,
        contract="soft tokens after 'Instruct: {instruction}\\nQuery:{text}' (no special tokens), left padding",
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
        family="GritLM",
        dim=4096,
        contract="BOS <|user|>\\n{instruction}\\n<|embed|>\\n{text}, bidirectional, mean over the text",
    )


# what the last-token families' evaluations share: queries get the MSMARCO instruction, documents none
_LAST_TOKEN: dict[str, Any] = {"method": "last", "pooling": "the last token (the end token), left padding"}
_LAST_TOKEN |= {"steps": None, "train_steps": None, "tau": 1.0, "normalize_eval": True}


def _family(**fields: Any) -> PublishedModel:
    """A row of a decoder embedder family: full weights (or an adapter on ``base``), single pass."""
    fields.setdefault("base", None)
    fields.setdefault("instructions", None)
    fields.setdefault("query_instruction", _WEB_QUERY)
    return PublishedModel(**fields)


# the Qwen-based families: bf16 weights, texts cut at 8192 tokens as their model cards' snippets do (the
# models read up to 32k tokens: pass max_length to go further)
_QWEN_BASED: dict[str, Any] = {**_LAST_TOKEN, "dtype": "bfloat16", "max_length": 8192}
_QWEN3 = "Qwen3-Embedding"
_QWEN3_CODE = "https://github.com/QwenLM/Qwen3-Embedding"
_QWEN3_CONTRACT = (
    "'Instruct: {instruction}\\nQuery:{text}' (no space after Query:; documents bare) + <|endoftext|>, "
    "left padding, causal, the last token's state, L2-normalised (Matryoshka: truncate, then normalise)"
)


def _qwen3(size: str, params: int, dim: int, reported: str) -> PublishedModel:
    # the model card's transformers snippet (get_detailed_instruct, last_token_pool, padding_side="left",
    # max_length 8192) and sentence-transformers config (prompts, 1_Pooling pooling_mode_lasttoken)
    return _family(
        **_QWEN_BASED,
        id=f"Qwen/Qwen3-Embedding-{size}",
        summary=f"Qwen3-Embedding {size}: last token, Matryoshka 32-{dim}",
        prompt_format="qwen3-embedding",
        attention="causal",
        architecture="qwen3",
        params=params,
        code=_QWEN3_CODE,
        paper="https://arxiv.org/abs/2506.05176",
        benchmark="MTEB(Multilingual, v1)",
        reported=reported,
        family=_QWEN3,
        dim=dim,
        matryoshka=(32, dim),
        contract=_QWEN3_CONTRACT,
    )


_GTE = "gte-Qwen2-instruct"
_GTE_CONTRACT = (
    "'Instruct: {instruction}\\nQuery: {text}' (documents bare) + <|endoftext|> (its tokenizer adds it), "
    "ATTENTION attention, the last token's state, L2-normalised"
)


def _gte(size: str, params: int, dim: int, attention: str, reported: str) -> PublishedModel:
    # the model card (sentence-transformers prompts "query", last-token pooling, add_eos_token) and the
    # attention the authors' remote code runs, as vLLM's tests pin it against sentence-transformers
    # (docs/families.md: bidirectional for 7B, causal for 1.5B)
    return _family(
        **_QWEN_BASED,
        id=f"Alibaba-NLP/gte-Qwen2-{size}-instruct",
        summary=f"gte-Qwen2 {size}: last token, {attention}",
        prompt_format="e5",
        attention=attention,
        architecture="qwen2",
        params=params,
        code=f"https://huggingface.co/Alibaba-NLP/gte-Qwen2-{size}-instruct",
        paper="https://arxiv.org/abs/2308.03281",
        benchmark="MTEB(eng, v1)",
        reported=reported,
        family=_GTE,
        dim=dim,
        contract=_GTE_CONTRACT.replace("ATTENTION", attention),
    )


_LLM2VEC = "LLM2Vec"
_LLM2VEC_CODE = "https://github.com/McGill-NLP/llm2vec"


def _llm2vec(backbone: str, architecture: str, params: int) -> PublishedModel:
    # llm2vec/llm2vec.py: instruction.strip() + " " + text tokenized whole (BOS), left padding with EOS,
    # bidirectional attention (its *BiModel classes), mean over the text tokens only (embed_mask),
    # max_length 512; the MSMARCO instruction of test_configs/mteb/task_to_instructions.json
    return _family(
        id=f"McGill-NLP/LLM2Vec-{backbone}-mntp-supervised",
        summary=f"LLM2Vec {backbone.split('-Instruct')[0]}: bidirectional, mean of the text",
        method="mean",
        prompt_format="llm2vec",
        attention="bidirectional",
        pooling="mean over the text tokens (instruction excluded)",
        steps=None,
        train_steps=None,
        tau=1.0,
        dtype="bfloat16",
        base=f"McGill-NLP/LLM2Vec-{backbone}-mntp",
        architecture=architecture,
        params=params,
        instructions="llm2vec",
        query_instruction=_WEB_QUERY + ":",
        normalize_eval=True,
        max_length=512,
        code=_LLM2VEC_CODE,
        paper="https://arxiv.org/abs/2404.05961",
        benchmark="MTEB(eng, v1)",
        reported="see the llm2vec README",
        family=_LLM2VEC,
        dim=4096,
        contract=(
            "BOS '{instruction} {text}' (documents bare), left padding, bidirectional, mean over the last "
            "len(tokenize(text)) tokens, L2-normalised"
        ),
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
        _qwen3("0.6B", 595_776_512, 1024, "MTEB multilingual 64.33 (model card)"),
        _qwen3("4B", 4_021_774_336, 2560, "MTEB multilingual 69.45 (model card)"),
        _qwen3("8B", 7_567_295_488, 4096, "MTEB multilingual 70.58 (model card)"),
        _gte("1.5B", _GTE_1_5B, 1536, "causal", "see the model card"),
        _gte("7B", _GTE_7B, 3584, "bidirectional", "MTEB 70.24 (56 tasks, model card)"),
        _family(
            **_LAST_TOKEN,
            id="intfloat/e5-mistral-7b-instruct",
            summary="e5-mistral: last token (EOS), causal",
            prompt_format="e5",
            attention="causal",
            dtype="float16",
            architecture="mistral",
            params=_MISTRAL_7B_STACK,
            max_length=4096,
            code="https://github.com/microsoft/unilm/tree/master/e5",
            paper="https://arxiv.org/abs/2401.00368",
            benchmark="MTEB(eng, v1)",
            reported="MTEB 66.63 (paper)",
            family="e5-mistral",
            dim=4096,
            contract=(
                "BOS 'Instruct: {instruction}\\nQuery: {text}' (documents bare) cut at max_length - 1, + EOS, "
                "causal, the last token's state, L2-normalised"
            ),
        ),
        _llm2vec("Meta-Llama-3-8B-Instruct", "llama", _LLAMA3_8B_STACK),
        _llm2vec("Mistral-7B-Instruct-v2", "mistral", _MISTRAL_7B_STACK),
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
