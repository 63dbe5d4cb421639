"""GIRCSE parity: genembed's public API against the official GIRCSE code's embeddings.

``../shared/reference/gircse`` holds tiny random Qwen2 and Mistral models, LoRA adapters on them and
``golden.json``: 54 cases computed by the official code (github.com/Roytsai27/GIRCSE, its README says how),
three instructions x K in {1, 5, 10} x {batched, one by one}, a temperature case, adapter cases, and the
per-step states z_1..z_5. Here every case runs through ``genembed.load(FOLDER, adapter=...)`` and
``encode(..., prompt_format="gircse")`` in float32; the token ids must be the golden ones exactly.

Honest comparison: ``load`` of a folder that is not the bundled model turns centering off (asserted, and
passed explicitly), loads no adapter unless given one, and the dtype is pinned to float32.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from genembed.encoders.prompts import encode_prompts

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "gircse"
MIN_COSINE = 0.9999


@cache
def _golden() -> dict:
    path = REFERENCE / "golden.json"
    if not path.is_file():
        pytest.skip(f"GIRCSE reference not found at {REFERENCE}")
    return json.loads(path.read_text())


def _cases() -> list[dict]:
    try:
        golden = _golden()
    except pytest.skip.Exception:
        return []
    return [case for model in golden["models"].values() for case in model["cases"]]


@cache
def _model(folder: str, adapter: str | None):
    import genembed

    model = genembed.load(
        REFERENCE / folder, adapter=REFERENCE / adapter if adapter else False, dtype="float32", device="cpu"
    )
    assert model.center is False  # load() centers only adapters that store centers; these must not be centered
    return model


def _golden_rows(case: dict) -> list[list[int]]:
    """The unpadded golden ids of each prompt (batched cases are one padded [6][L] array)."""
    if case["batch_mode"] == "batch":
        pairs = zip(case["input_ids"][0], case["attention_mask"][0], strict=True)
    else:
        pairs = ((ids[0], mask[0]) for ids, mask in zip(case["input_ids"], case["attention_mask"], strict=True))
    return [[i for i, m in zip(ids, mask, strict=True) if m] for ids, mask in pairs]


def _embed(case: dict) -> np.ndarray:
    model = _model(case["model_folder"], case["adapter_folder"])
    kwargs = {"instruction": case["instruction"], "steps": case["K"], "prompt_format": "gircse", "center": False}
    kwargs |= {"tau": case["logit_temperature"]}
    texts = _golden()["texts"]
    if case["batch_mode"] == "batch":
        return model.encode(texts, batch_size=case["batch_size"], **kwargs)
    return np.stack([model.encode(text, **kwargs) for text in texts])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_there_are_54_cases():
    assert len(_cases()) == 54


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case["id"])
def test_token_ids_are_the_golden_ids(case):
    tokenizer = _model(case["model_folder"], None).backbone.tokenizer
    prompts = encode_prompts(tokenizer, _golden()["texts"], instruction=case["instruction"], prompt_format="gircse")
    assert [p.ids for p in prompts] == _golden_rows(case)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id  # the reference pads (left) with EOS


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case["id"])
def test_embeddings_match_the_official_code(case):
    got = _embed(case)
    want = np.asarray(case["embeddings"])
    assert got.shape == want.shape
    assert _cosines(got, want).min() > MIN_COSINE


@pytest.mark.parametrize("case", [c for c in _cases() if c["batch_mode"] == "batch"], ids=lambda case: case["id"])
def test_embeddings_match_without_the_prefix_cache(case, monkeypatch):
    """The cases above run after cached instruction prefixes (the default); whole prompts match as well."""
    monkeypatch.setenv("GENEMBED_PREFIX_CACHE", "0")
    assert _cosines(_embed(case), np.asarray(case["embeddings"])).min() > MIN_COSINE


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-mistral"])
def test_per_step_states_match(name):
    """z_1..z_5 (un-normalised running means of the soft-token states) of retrieve/K5/batch."""
    golden = _golden()
    diagnostics = golden["models"][name]["diagnostics"]["per_step"]
    model = _model(name, None)
    got = model.encode(
        golden["texts"],
        instruction=golden["instructions"]["retrieve"],
        steps=5,
        prompt_format="gircse",
        center=False,
        normalize=False,
        return_all_steps=True,
    )
    hidden = np.asarray(diagnostics["soft_token_hidden_states_unnormalised"])  # (6, 5, D): h_1..h_5
    running_means = np.cumsum(hidden, axis=1) / np.arange(1, 6)[None, :, None]  # z_k = mean(h_1..h_k)
    normalised = np.asarray(diagnostics["z_l2_normalised"]).transpose(1, 0, 2)  # (5, 6, D) -> (6, 5, D)
    assert got.shape == running_means.shape == normalised.shape == (6, 5, model.dim)
    assert _cosines(got, normalised).min() > MIN_COSINE
    np.testing.assert_allclose(got, running_means, atol=1e-4, rtol=1e-4)


def test_another_format_fails_the_comparison():
    """The check can fail: the same instruction in genembed's plain format gives other embeddings."""
    case = next(c for c in _cases() if c["id"] == "tiny-mistral/retrieve/K5/T1.0/batch")
    model = _model(case["model_folder"], None)
    texts, instruction = _golden()["texts"], case["instruction"]
    got = model.encode(texts, instruction=instruction, steps=5, prompt_format="plain", center=False)
    assert _cosines(got, np.asarray(case["embeddings"])).min() < MIN_COSINE


def test_qwen2_folder_tokenizes_as_its_tokenizer_json():
    """The reference ids come from the saved tokenizer.json; transformers 5's Qwen2Tokenizer would split
    ``"\\n\\n"`` into one token where the file makes two (genembed.backbone.tokenizer)."""
    from tokenizers import Tokenizer

    _golden()  # skips without the reference
    saved = Tokenizer.from_file(str(REFERENCE / "tiny-qwen2" / "tokenizer.json"))
    tokenizer = _model("tiny-qwen2", None).backbone.tokenizer
    (prompt,) = encode_prompts(
        tokenizer, ["one\n\ntwo   three\n\n\nfour"], instruction="Sum up.", prompt_format="gircse"
    )
    want = saved.encode("Instruct: Sum up.\nQuery:one\n\ntwo   three\n\n\nfour", add_special_tokens=False).ids
    assert prompt.ids == want
