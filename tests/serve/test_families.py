"""A decoder-embedder family served: the OpenAI and Cohere routes embed queries and documents with the
family's own contract (its reference embeddings, tests/assets/golden/families.npz), and ``/info`` says so."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from ..golden.make_family_golden import DOCUMENTS, FAMILIES, QUERIES, build_family_folder
from ..models.test_families import MIN_COSINE, _golden, _min_cosine

pytestmark = pytest.mark.integration

QWEN3 = "Qwen/Qwen3-Embedding-0.6B"


@pytest.fixture(scope="module")
def served_qwen3(tmp_path_factory):
    import genembed
    from genembed.serve import ServeSettings, create_app, running_server

    folder = build_family_folder("qwen3-embedding", tmp_path_factory.mktemp("served") / "qwen3")
    model = genembed.load(folder, as_published=QWEN3, dtype="float32", device="cpu")
    # as `genembed serve --model FOLDER --as-published ID` does: the model's own method
    app = create_app(model, ServeSettings(max_input_tokens=64, method=model.method))
    with running_server(app) as (url, _server):
        yield url


def _openai(url: str, texts: list[str], **body) -> np.ndarray:
    response = httpx.post(url + "/v1/embeddings", json={"input": texts, **body}, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]])


def _cohere(url: str, texts: list[str], input_type: str) -> np.ndarray:
    body = {"texts": texts, "input_type": input_type, "embedding_types": ["float"]}
    response = httpx.post(url + "/v2/embed", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return np.array(response.json()["embeddings"]["float"])


@pytest.mark.parametrize(
    ("side", "body"),
    [
        ("query", {"input_type": "search_query"}),
        ("query", {"prompt_name": "query"}),
        ("document", {"input_type": "search_document"}),
        ("document", {"prompt_name": "document"}),
    ],
)
def test_openai_route_embeds_with_the_family_contract(served_qwen3, side, body):
    texts = QUERIES if side == "query" else DOCUMENTS
    assert _min_cosine(_openai(served_qwen3, texts, **body), _golden()[f"qwen3-embedding/{side}"]) >= MIN_COSINE


@pytest.mark.parametrize(("side", "input_type"), [("query", "search_query"), ("document", "search_document")])
def test_cohere_route_embeds_with_the_family_contract(served_qwen3, side, input_type):
    texts = QUERIES if side == "query" else DOCUMENTS
    assert _min_cosine(_cohere(served_qwen3, texts, input_type), _golden()[f"qwen3-embedding/{side}"]) >= MIN_COSINE


def test_a_query_embedded_as_a_document_is_not_the_query(served_qwen3):
    got = _openai(served_qwen3, QUERIES, input_type="search_document")
    assert _min_cosine(got, _golden()["qwen3-embedding/query"]) < 0.9999


def test_info_names_the_family_and_its_contract(served_qwen3):
    info = httpx.get(served_qwen3 + "/info", timeout=30).json()
    assert info["family"] == "Qwen3-Embedding" and info["dimension"] == 32
    contract = info["contract"]
    assert (contract["id"], contract["prompt_format"], contract["method"], contract["attention"]) == (
        QWEN3,
        "qwen3-embedding",
        "last",
        "causal",
    )
    assert contract["query"] == FAMILIES["qwen3-embedding"]["query_prompt"].removeprefix("Instruct: ").removesuffix(
        "\nQuery:"
    )
    assert contract["document"] == "" and contract["matryoshka"] == [32, 1024]
    assert "<|endoftext|>" in contract["details"]


def test_info_of_another_model_names_no_family(served):
    info = httpx.get(served.url + "/info", timeout=30).json()
    assert info["family"] is None and info["contract"] is None
