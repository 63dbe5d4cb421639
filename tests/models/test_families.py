"""Family parity: genembed runs each decoder-embedder family of ``genembed models`` as its reference does.

``tests/golden/make_family_golden.py`` builds a tiny random model of each family (Qwen3, Qwen2, Mistral,
Llama architectures), saved as the family saves it, and stored the query and document embeddings of its
reference implementation (sentence-transformers with the family's config, the e5-mistral model card's
snippet, llm2vec's encode steps) in ``tests/assets/golden/families.npz``. Here the same folders load with
``genembed.load(folder, as_published=ID)`` (float32, CPU) and embed the same mixed-length batches.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from ..golden.make_family_golden import DOCUMENTS, FAMILIES, GOLDEN, QUERIES, build_family_folder

MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {family: build_family_folder(family, root / family) for family in FAMILIES}


@cache
def _golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _load(folder: Path, family: str, **settings):
    import genembed

    return genembed.load(folder, as_published=FAMILIES[family]["id"], dtype="float32", device="cpu", **settings)


def _embed(model, **kwargs) -> dict[str, np.ndarray]:
    run = {"batch_size": 3, "max_length": 64} | kwargs
    return {"query": model.encode_query(QUERIES, **run), "document": model.encode_document(DOCUMENTS, **run)}


def _min_cosine(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(((got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)).min())


def test_every_family_has_a_row_and_golden_embeddings():
    from genembed.models.published import published_model

    golden = _golden()
    for family, spec in FAMILIES.items():
        entry = published_model(spec["id"])
        assert entry is not None and entry.family
        assert golden[f"{family}/query"].shape == (len(QUERIES), 32)
        assert golden[f"{family}/document"].shape == (len(DOCUMENTS), 32)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(("prefix_cache", "fast_path"), [("1", "1"), ("0", "0")], ids=["default", "whole-hf"])
def test_embeddings_match_the_reference(folders, family, prefix_cache, fast_path, monkeypatch):
    monkeypatch.setenv("GENEMBED_PREFIX_CACHE", prefix_cache)
    monkeypatch.setenv("GENEMBED_FAST_PATH", fast_path)
    model = _load(folders[family], family)
    assert model.center is False
    entry = FAMILIES[family]
    got = _embed(model)
    for side in ("query", "document"):
        assert _min_cosine(got[side], _golden()[f"{family}/{side}"]) >= MIN_COSINE, (entry["id"], side)


@pytest.mark.parametrize(
    ("family", "change"),
    [
        ("qwen3-embedding", {"prompt_format": "e5"}),  # "Query: " with a space
        ("gte-qwen2-7b", {"attention": "causal"}),  # the 7B's attention is bidirectional
        ("gte-qwen2-1.5b", {"attention": "bidirectional"}),  # the 1.5B's is causal
        ("e5-mistral", {"prompt_format": "gircse"}),  # no BOS, no EOS, no space
        ("llm2vec-llama3", {"method": "last"}),  # mean over the text, not the last token
    ],
)
def test_a_slip_in_the_contract_fails_the_comparison(folders, family, change):
    """The comparison can fail: one wrong detail of a family's contract moves the query embeddings."""
    model = _load(folders[family], family, **change)
    assert _min_cosine(_embed(model)["query"], _golden()[f"{family}/query"]) < 0.9999


def test_matryoshka_dimensions_are_the_references_truncated_and_renormalised(folders):
    model = _load(folders["qwen3-embedding"], "qwen3-embedding", truncate_dim=16)
    got = _embed(model)["document"]
    want = _golden()["qwen3-embedding/document"][:, :16]
    assert got.shape == (len(DOCUMENTS), 16)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)
    assert _min_cosine(got, want) >= MIN_COSINE


def test_the_query_prompt_ends_with_the_family_end_token(folders):
    """Token ids, not only vectors: Qwen3-Embedding's query is its instruction, ``Query:`` without a space,
    the text and ``<|endoftext|>``; e5-mistral's starts with BOS and ends with EOS."""
    from genembed.encoders.prompts import encode_prompts

    qwen = _load(folders["qwen3-embedding"], "qwen3-embedding")
    tokenizer = qwen.backbone.tokenizer
    (prompt,) = encode_prompts(
        tokenizer, ["guitar"], instruction=qwen.prompts["query"], prompt_format=qwen.prompt_format
    )
    want = tokenizer(f"Instruct: {qwen.prompts['query']}\nQuery:guitar")["input_ids"]
    assert prompt.ids == want and prompt.ids[-1] == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    e5 = _load(folders["e5-mistral"], "e5-mistral")
    tokenizer = e5.backbone.tokenizer
    (prompt,) = encode_prompts(tokenizer, ["guitar"], prompt_format=e5.prompt_format)
    assert prompt.ids[0] == tokenizer.bos_token_id and prompt.ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(prompt.ids[prompt.text_start : prompt.text_end]) == "guitar"


def test_an_hf_cache_snapshot_runs_as_its_hub_id(folders, tmp_path):
    """A folder of the HF cache (``models--ORG--NAME/snapshots/REV``) needs no ``as_published``."""
    import shutil

    import genembed

    snapshot = tmp_path / "models--Qwen--Qwen3-Embedding-0.6B" / "snapshots" / "abc123"
    shutil.copytree(folders["qwen3-embedding"], snapshot)
    model = genembed.load(snapshot, dtype="float32", device="cpu")
    assert (model.method, model.prompt_format, model.backbone.name) == (
        "last",
        "qwen3-embedding",
        "Qwen/Qwen3-Embedding-0.6B",
    )
    assert _min_cosine(_embed(model)["query"], _golden()["qwen3-embedding/query"]) >= MIN_COSINE


def test_as_published_names_a_published_model(folders):
    import genembed

    with pytest.raises(ValueError, match="as_published must be a hub id of `genembed models`, got 'nope/nope'"):
        genembed.load(folders["e5-mistral"], as_published="nope/nope", device="cpu")


def test_a_saved_family_model_loads_back_with_its_contract(folders, tmp_path):
    """``model.save`` keeps the family's method, prompt format, attention and query instruction."""
    import genembed

    model = _load(folders["gte-qwen2-7b"], "gte-qwen2-7b")
    model.save(tmp_path / "saved")
    loaded = genembed.load(tmp_path / "saved", dtype="float32", device="cpu")
    assert (loaded.method, loaded.prompt_format, loaded.attention, loaded.prompts["query"]) == (
        "last",
        "e5",
        "bidirectional",
        model.prompts["query"],
    )
    got = _embed(loaded)
    for side in ("query", "document"):
        assert _min_cosine(got[side], _golden()[f"gte-qwen2-7b/{side}"]) >= MIN_COSINE


def _lora(model, folder: Path, seed: int) -> Path:
    """A LoRA adapter with random nonzero weights on ``model``, saved in ``folder``."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.3)
    peft.save_pretrained(folder)
    return folder


def test_llm2vec_by_hub_id_merges_the_mntp_adapter_then_adds_the_supervised_one(folders, fake_hub, tmp_path):
    """LLM2Vec's hub checkpoints are two adapters: ``-mntp`` (a config.json beside a LoRA adapter, no weights)
    on the instruct model, merged as llm2vec's ``from_pretrained`` merges it, then ``-supervised`` on top."""
    import shutil

    from transformers import AutoModelForCausalLM

    import genembed

    from ..conftest import rebase_adapter

    base_id, mntp_id = "meta-llama/Meta-Llama-3-8B-Instruct", "McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp"
    supervised_id = f"{mntp_id}-supervised"
    base = folders["llm2vec-llama3"]
    lm = AutoModelForCausalLM.from_pretrained(base).eval()
    mntp = _lora(lm, tmp_path / "mntp", seed=1)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base / name, mntp / name)
    merged = genembed.load(base, adapter=mntp, dtype="float32", device="cpu").backbone.model.merge_and_unload()
    supervised = _lora(merged, tmp_path / "supervised", seed=2)
    fake_hub(base_id, base)
    fake_hub(mntp_id, mntp, edit=rebase_adapter(base_id))
    fake_hub(supervised_id, supervised, edit=rebase_adapter(mntp_id))

    model = genembed.load(supervised_id, dtype="float32", device="cpu")
    assert (model.method, model.prompt_format, model.attention, model.adapter) == (
        "mean",
        "llm2vec",
        "bidirectional",
        supervised_id,
    )
    # the same weights built by hand: base + mntp merged and saved, the supervised adapter attached
    merged.save_pretrained(tmp_path / "merged")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base / name, tmp_path / "merged" / name)
    by_hand = genembed.load(
        tmp_path / "merged", adapter=supervised, as_published=supervised_id, dtype="float32", device="cpu"
    )
    want = by_hand.encode_query(QUERIES, batch_size=3, max_length=64)
    assert _min_cosine(model.encode_query(QUERIES, batch_size=3, max_length=64), want) >= MIN_COSINE
    assert _min_cosine(want, _golden()["llm2vec-llama3/query"]) < 0.9999  # the adapters changed the model
