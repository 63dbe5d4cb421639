"""The bundled default model behind the server: one process embeds, chats and reranks sensibly."""

from __future__ import annotations

import httpx
import numpy as np
import openai
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def real_server(real_model):
    from genembed.serve import create_app, running_server

    # the server's model thread and this test use the model one after the other, never at once
    with running_server(create_app(real_model)) as (url, _):
        yield url


def test_one_server_embeds_chats_and_reranks(real_server, real_model):
    client = openai.OpenAI(base_url=real_server + "/v1", api_key="unused", max_retries=0, timeout=120)
    texts = ["How do plants make food?", "Photosynthesis turns light into sugar.", "Tax law is complex."]
    response = client.embeddings.create(input=texts, model="genembed")
    got = np.array([d.embedding for d in response.data])
    np.testing.assert_allclose(got, real_model.encode(texts), atol=1e-4)
    assert got[0] @ got[1] > got[0] @ got[2]  # the related pair is closer

    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    reply = client.chat.completions.create(model="genembed", messages=messages, max_tokens=8)
    assert reply.choices[0].message.content == real_model.generate(messages, max_new_tokens=8)
    assert "Paris" in reply.choices[0].message.content

    docs = ["The Eiffel Tower is in Paris, the capital of France.", "Bananas are rich in potassium."]
    ranked = httpx.post(
        real_server + "/v1/rerank", json={"query": "What is the capital of France?", "documents": docs}, timeout=120
    ).json()
    assert [r["index"] for r in ranked["results"]] == [0, 1]


@pytest.mark.parametrize("scoring", ["query_likelihood", "yes_no"])
def test_cohere_client_scores_relevant_documents_higher(real_server, scoring):
    import cohere

    client = cohere.ClientV2(base_url=real_server, api_key="unused", timeout=120)
    docs = [
        "The Eiffel Tower is in Paris, the capital of France.",
        "Bananas are rich in potassium.",
        "Paris is the capital of France.",
        "The stock market fell sharply on Monday.",
    ]
    response = client.rerank(
        model="genembed",
        query="What is the capital of France?",
        documents=docs,
        request_options={"additional_body_parameters": {"scoring": scoring}},
    )
    score = {r.index: r.relevance_score for r in response.results}
    assert all(0.0 <= s <= 1.0 for s in score.values())
    assert min(score[0], score[2]) > max(score[1], score[3]), score  # both relevant documents first
    if scoring == "query_likelihood":  # a distribution over the documents
        assert sum(score.values()) == pytest.approx(1.0, abs=1e-5)
    else:  # each document judged on its own
        alone = client.rerank(
            model="genembed",
            query="What is the capital of France?",
            documents=[docs[1]],
            request_options={"additional_body_parameters": {"scoring": scoring}},
        )
        assert alone.results[0].relevance_score == pytest.approx(score[1], abs=1e-4)
