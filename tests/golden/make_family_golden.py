"""Reference embeddings of the decoder-embedder families, from their own reference implementations.

For each family of ``genembed models`` (Qwen3-Embedding, gte-Qwen2-instruct 7B and 1.5B,
e5-mistral-7b-instruct, LLM2Vec) this builds a tiny random model of its architecture (Qwen3, Qwen2,
Mistral, Llama; 2 layers, width 32) saved the way the family saves it: the bare decoder stack (no LM
head), a tokenizer with the family's special tokens, end-token rule and padding side, and, where the
family ships one, its sentence-transformers configuration (prompts, last-token pooling with
``include_prompt``, normalisation). Then it embeds mixed-length queries (with the family's query
instruction) and documents (bare) in batches with the family's reference implementation:

- Qwen3-Embedding, gte-Qwen2: ``SentenceTransformer(folder).encode(..., prompt_name="query")``
  (gte-Qwen2-7B's bidirectional attention through ``config.is_causal = false``; gte-Qwen2-1.5B's config
  says the same but the authors' code runs causal, so its reference loads with ``is_causal=True``);
- e5-mistral: the model card's transformers snippet (cut at ``max_length - 1``, append EOS, pad, the
  card's ``last_token_pool``), written out below;
- LLM2Vec: llm2vec's ``LLM2Vec.encode`` steps (``_convert_to_str``, ``tokenize`` with its
  ``embed_mask``, left padding with EOS, bidirectional attention, mean over the last ``len(tokenize(text))``
  positions), written out below from github.com/McGill-NLP/llm2vec (llm2vec/llm2vec.py), since the
  package pins an older transformers.

``tests/models/test_families.py`` builds the same folders (seeded, deterministic) and checks that
``genembed.load(folder, as_published=ID)`` gives these embeddings. Run:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tests/golden/make_family_golden.py

to write ``tests/assets/golden/families.npz`` (float32 arrays only). Rerun it only when a family's
reference changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "assets" / "golden" / "families.npz"

QUERIES = [
    "what is the capital of France?",
    "guitar",
    "how does a quick brown fox jump over a lazy dog that sleeps in the sun all day long",
    "is this movie wonderful",
]
DOCUMENTS = [
    "Paris is the capital of France.",
    "A man is playing a guitar on the stage. The crowd sings along with him for the whole evening.",
    "The dog sleeps.",
    "I love this movie, it is wonderful and moving.",
    "ok",
]
_CORPUS = [*QUERIES, *DOCUMENTS, "Instruct: Given a web search query, retrieve relevant passages that answer the query"]

# family -> how its tiny folder is built and which reference embeds it
FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3-embedding": {
        "id": "Qwen/Qwen3-Embedding-0.6B",
        "architecture": "qwen3",
        # Qwen3-Embedding's tokenizer: EOS <|im_end|>, pads with <|endoftext|> on the left and its
        # post-processor ends every text with <|endoftext|>
        "tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "append": "<|endoftext|>",
        "padding_side": "left",
        "tie": True,
        "reference": "sentence-transformers",
        "query_prompt": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
    },
    "gte-qwen2-7b": {
        "id": "Alibaba-NLP/gte-Qwen2-7B-instruct",
        "architecture": "qwen2",
        "tokens": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "append": "<|endoftext|>",  # add_eos_token
        "padding_side": "right",
        "tie": False,
        "is_causal": False,
        "reference": "sentence-transformers",
        "query_prompt": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: ",
    },
    "gte-qwen2-1.5b": {
        "id": "Alibaba-NLP/gte-Qwen2-1.5B-instruct",
        "architecture": "qwen2",
        "tokens": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        "append": "<|endoftext|>",
        "padding_side": "right",
        "tie": False,
        # its config.json says is_causal false, but the authors' (remote) code is hardcoded causal (vLLM's
        # supported-models note): the reference runs causal whatever the config says
        "is_causal": False,
        "reference_config": {"is_causal": True},
        "reference": "sentence-transformers",
        "query_prompt": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: ",
    },
    "e5-mistral": {
        "id": "intfloat/e5-mistral-7b-instruct",
        "architecture": "mistral",
        "tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"},
        "prepend": "<s>",
        "padding_side": "right",
        "tie": False,
        "reference": "e5-snippet",
        "query_instruction": "Given a web search query, retrieve relevant passages that answer the query",
    },
    "llm2vec-llama3": {
        "id": "McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp-supervised",
        "architecture": "llama",
        "tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "prepend": "<|begin_of_text|>",
        "padding_side": "left",
        "tie": False,
        "reference": "llm2vec",
        "query_instruction": "Given a web search query, retrieve relevant passages that answer the query:",
    },
}
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|eot_id|>"]
_BATCH = 3  # texts per batch: every batch mixes lengths
_MAX_LENGTH = 64


def _tokenizer(spec: dict[str, Any]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_CORPUS * 4, trainer=trainer)
    if "append" in spec:  # the family's tokenizer ends every text with this token
        end = spec["append"]
        raw.post_processor = processors.TemplateProcessing(
            single=f"$A {end}", pair=f"$A {end} $B {end}", special_tokens=[(end, raw.token_to_id(end))]
        )
    elif "prepend" in spec:  # ... or starts it with its BOS
        bos = spec["prepend"]
        raw.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, raw.token_to_id(bos))]
        )
    return PreTrainedTokenizerFast(tokenizer_object=raw, padding_side=spec["padding_side"], **spec["tokens"])


def _config(spec: dict[str, Any], tokenizer: Any) -> Any:
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    kinds = {"qwen3": Qwen3Config, "qwen2": Qwen2Config, "mistral": MistralConfig, "llama": LlamaConfig}
    shape = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    shape |= {"num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 512}
    config = kinds[spec["architecture"]](
        vocab_size=len(tokenizer),
        tie_word_embeddings=spec["tie"],
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    if "is_causal" in spec:
        config.is_causal = spec["is_causal"]
    return config


def build_family_folder(family: str, folder: Path) -> Path:
    """Save family ``family``'s tiny random model in ``folder`` as the family saves it; return ``folder``."""
    from transformers import AutoModel

    spec = FAMILIES[family]
    tokenizer = _tokenizer(spec)
    config = _config(spec, tokenizer)
    torch.manual_seed(sum(map(ord, family)))
    model = AutoModel.from_config(config).eval()
    with torch.no_grad():  # random init is near-uniform; a 3x embedding scale keeps texts apart
        model.get_input_embeddings().weight.mul_(3.0)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if spec["reference"] == "sentence-transformers":
        _save_sentence_transformers(folder, spec, config.hidden_size)
    return folder


def _save_sentence_transformers(folder: Path, spec: dict[str, Any], dim: int) -> None:
    """The family's sentence-transformers files, as its hub repo ships them."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    pooling = {"word_embedding_dimension": dim, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False}
    pooling |= {"pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}
    pooling |= {"pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True, "include_prompt": True}
    prompts = {"prompts": {"query": spec["query_prompt"], "document": ""}, "default_prompt_name": None}
    files = {
        "modules.json": modules,
        "1_Pooling/config.json": pooling,
        "sentence_bert_config.json": {"max_seq_length": _MAX_LENGTH, "do_lower_case": False},
        "config_sentence_transformers.json": prompts | {"similarity_fn_name": "cosine"},
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(data, indent=2), encoding="utf-8")
    (folder / "2_Normalize").mkdir(exist_ok=True)


def _sentence_transformers(folder: Path, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", config_kwargs=spec.get("reference_config"))
    run = {"batch_size": _BATCH, "convert_to_numpy": True}
    return {
        "query": model.encode(QUERIES, prompt_name="query", **run),
        "document": model.encode(DOCUMENTS, prompt_name="document", **run),
    }


def _e5_snippet(folder: Path, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """intfloat/e5-mistral-7b-instruct's model card: get_detailed_instruct, ids cut at max_length - 1 then
    EOS appended, ``tokenizer.pad``, the card's ``last_token_pool``, L2 normalisation."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()

    def last_token_pool(last_hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        left_padding = attention_mask[:, -1].sum() == attention_mask.shape[0]
        if left_padding:
            return last_hidden_states[:, -1]
        sequence_lengths = attention_mask.sum(dim=1) - 1
        return last_hidden_states[torch.arange(last_hidden_states.shape[0]), sequence_lengths]

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), _BATCH):
            batch = tokenizer(
                texts[start : start + _BATCH],
                max_length=_MAX_LENGTH - 1,
                return_attention_mask=False,
                padding=False,
                truncation=True,
            )
            batch["input_ids"] = [ids + [tokenizer.eos_token_id] for ids in batch["input_ids"]]
            batch = tokenizer.pad(batch, padding=True, return_attention_mask=True, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**batch).last_hidden_state
            out.append(torch.nn.functional.normalize(last_token_pool(hidden, batch["attention_mask"]), dim=-1))
        return torch.cat(out).numpy()

    instruction = spec["query_instruction"]
    return {"query": embed([f"Instruct: {instruction}\nQuery: {q}" for q in QUERIES]), "document": embed(DOCUMENTS)}


def _llm2vec(folder: Path, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """llm2vec's ``LLM2Vec.encode`` with ``pooling_mode="mean"``, ``skip_instruction=True``,
    ``max_length`` as here, bidirectional attention; then L2 normalisation (its retrieval example's cosine)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token = tokenizer.eos_token  # LLM2Vec.from_pretrained
    tokenizer.padding_side = "left"
    model = AutoModel.from_pretrained(folder).eval()
    model.config.is_causal = False  # llm2vec's *BiModel: attention masks padding only
    separator = "!@#$%^&*()"

    def convert_to_str(instruction: str, text: str) -> str:
        return f"{instruction.strip()} {separator}{text}" if instruction else f"{separator}{text}"

    def tokenize(texts: list[str]) -> dict[str, torch.Tensor]:
        texts_2, original = [], []
        for text in texts:
            parts = text.split(separator)
            texts_2.append(parts[1] if len(parts) > 1 else "")
            original.append("".join(parts))
        features = tokenizer(original, return_tensors="pt", padding=True, truncation=True, max_length=_MAX_LENGTH)
        masks = []
        for row, text in enumerate(texts_2):
            ids = tokenizer([text], padding=True, truncation=True, max_length=_MAX_LENGTH, add_special_tokens=False)
            mask = torch.zeros_like(features["attention_mask"][row])
            n = len(ids["input_ids"][0])
            if n > 0:
                mask[-n:] = 1
            masks.append(mask)
        features["embed_mask"] = torch.stack(masks)
        return features

    def embed(pairs: list[tuple[str, str]]) -> np.ndarray:
        sentences = [convert_to_str(instruction, text) for instruction, text in pairs]
        out = []
        for start in range(0, len(sentences), _BATCH):
            features = tokenize(sentences[start : start + _BATCH])
            embed_mask = features.pop("embed_mask")
            with torch.no_grad():
                hidden = model(**features).last_hidden_state
            lengths = embed_mask.sum(dim=-1)
            pooled = torch.stack([hidden[i, -n:, :].mean(dim=0) for i, n in enumerate(lengths)])
            out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out).numpy()

    instruction = spec["query_instruction"]
    return {"query": embed([(instruction, q) for q in QUERIES]), "document": embed([("", d) for d in DOCUMENTS])}


_REFERENCES = {"sentence-transformers": _sentence_transformers, "e5-snippet": _e5_snippet, "llm2vec": _llm2vec}


def reference_embeddings(family: str, folder: Path) -> dict[str, np.ndarray]:
    """The family's reference implementation's query and document embeddings of the tiny model in ``folder``."""
    spec = FAMILIES[family]
    return _REFERENCES[spec["reference"]](folder, spec)


def compute_golden(workdir: Path) -> dict[str, np.ndarray]:
    """Every family's reference embeddings, keyed ``"{family}/query"`` and ``"{family}/document"``."""
    out = {}
    for family in FAMILIES:
        embeddings = reference_embeddings(family, build_family_folder(family, workdir / family))
        out |= {f"{family}/{side}": np.asarray(vectors, np.float32) for side, vectors in embeddings.items()}
    return out


if __name__ == "__main__":
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        golden = compute_golden(Path(tmp))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    np.savez(GOLDEN, **golden)
    print(f"wrote {len(golden)} arrays to {GOLDEN}")
