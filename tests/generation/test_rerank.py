from __future__ import annotations

import pytest
import torch

from genembed.generation.rerank import RerankResult, answer_token_ids, rerank_prompt

QUERY = "What is the capital of France?"
DOCS = [
    "Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog, again and again, for a much longer while.",
    "I love this movie.",
    "A man is playing a guitar on the stage.",
    "x",
]


def _hand_score(backbone, query: str, doc: str, instruction: str) -> float:
    """The whole prompt in one unpadded forward pass; log-softmax over the two answer logits."""
    tok = backbone.tokenizer
    prompt = rerank_prompt(tok, query, instruction)
    ids = prompt.prefix + tok(doc, add_special_tokens=False)["input_ids"] + prompt.suffix
    with torch.no_grad():
        logits = backbone.model(torch.tensor([ids])).logits[0, -1]
    yes, no = answer_token_ids(tok)
    log_probs = torch.log_softmax(logits[[yes, no]], dim=-1)
    return float(log_probs[0] - log_probs[1])


def test_scores_equal_hand_computation_and_are_sorted(chatty_model):
    results = chatty_model.rerank(QUERY, DOCS, batch_size=2, instruction="Judge relevance.", scoring="yes_no")
    assert sorted(r.index for r in results) == list(range(len(DOCS)))
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    for r in results:
        assert isinstance(r, RerankResult) and r.document == DOCS[r.index]
        assert r.score == pytest.approx(
            _hand_score(chatty_model.backbone, QUERY, r.document, "Judge relevance."), abs=1e-4
        )
    assert len({round(r.score, 4) for r in results}) == len(DOCS)  # the check above can tell documents apart


def test_batching_does_not_change_scores(chatty_model):
    one = {r.index: r.score for r in chatty_model.rerank(QUERY, DOCS, batch_size=1, scoring="yes_no")}
    many = {r.index: r.score for r in chatty_model.rerank(QUERY, DOCS, batch_size=8, scoring="yes_no")}
    assert one == pytest.approx(many, abs=1e-4)


def test_top_n_and_instruction(chatty_model):
    full = chatty_model.rerank(QUERY, DOCS, scoring="yes_no")
    assert chatty_model.rerank(QUERY, DOCS, top_n=2, scoring="yes_no") == full[:2]
    other = chatty_model.rerank(QUERY, DOCS, instruction="A different task description.", scoring="yes_no")
    assert {r.index: r.score for r in other} != pytest.approx({r.index: r.score for r in full}, abs=1e-4)


def test_prompt_shape(tiny):
    prompt = rerank_prompt(tiny.tokenizer, QUERY, "Judge relevance.")
    text = tiny.tokenizer.decode(prompt.prefix) + "DOC" + tiny.tokenizer.decode(prompt.suffix)
    assert text == (
        "<|im_start|>user\nJudge relevance.\n\nQuery: What is the capital of France?\n\nDocument: DOC\n\n"
        "Is the document relevant to the query? Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_long_documents_are_cut(chatty_model):
    long_a, long_b = "word " * 50 + "ending one", "word " * 50 + "another ending"
    a, b = (chatty_model.rerank(QUERY, [d], max_length=20, scoring="yes_no")[0].score for d in (long_a, long_b))
    assert a == pytest.approx(b, abs=1e-5)


def test_a_long_document_is_cut_at_the_default_length_not_refused(chatty_model):
    tokenizer = chatty_model.backbone.tokenizer
    long = " ".join(["Rivers carry water from the hills down to the sea."] * 100)  # 1,000 words
    ids = tokenizer(long, add_special_tokens=False).input_ids
    assert len(long.split()) == 1000 and len(ids) > 512
    first = tokenizer.decode(ids[:512])
    assert tokenizer(first, add_special_tokens=False).input_ids == ids[:512]  # the cut text tokenizes back
    for scoring in ("query_likelihood", "yes_no"):
        whole, cut = (chatty_model.rerank(QUERY, [d, "Paris."], scoring=scoring) for d in (long, first))
        assert [r.score for r in whole] == pytest.approx([r.score for r in cut], abs=1e-5)


def test_empty_and_bad_inputs(chatty_model):
    assert chatty_model.rerank(QUERY, []) == []
    with pytest.raises(TypeError, match=r"documents\[1\] must be a string, got int"):
        chatty_model.rerank(QUERY, ["a", 2])
    with pytest.raises(TypeError, match="got one string"):
        chatty_model.rerank(QUERY, "a document", scoring="yes_no")
    with pytest.raises(ValueError, match="top_n must be >= 1"):
        chatty_model.rerank(QUERY, ["a"], top_n=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "scoring",
    [
        pytest.param(
            "yes_no",
            marks=pytest.mark.xfail(
                strict=True,
                reason="the raw SmolLM2-135M answers the yes/no relevance prompt near chance "
                "(scifact-dev nDCG@10 22.3 -> 14.3 after yes/no reranking); strict: passing means it improved",
            ),
        ),
        "query_likelihood",
    ],
)
def test_real_model_ranks_relevant_passage_first(real_model, scoring):
    query = "How do plants make their food?"
    docs = [
        "The stock market fell sharply on Tuesday after the central bank raised interest rates.",
        "Plants make their food by photosynthesis: they use sunlight, water and carbon dioxide to produce sugar.",
        "The recipe needs two eggs, flour and a cup of milk.",
    ]
    results = real_model.rerank(query, docs, scoring=scoring)
    assert results[0].index == 1, results
    assert results[0].score > results[1].score + 0.5, results


def _hand_query_likelihood(backbone, query: str, doc: str, instruction: str) -> float:
    """Mean log-probability of the query tokens after the prompt, from one unpadded forward pass."""
    from genembed.generation.query_likelihood import query_likelihood_prompt

    tok = backbone.tokenizer
    before, after = query_likelihood_prompt(tok, instruction)
    q = tok(query, add_special_tokens=False)["input_ids"]
    ids = before + tok(doc, add_special_tokens=False)["input_ids"] + after + q
    with torch.no_grad():
        log_probs = torch.log_softmax(backbone.model(torch.tensor([ids])).logits[0], dim=-1)
    start = len(ids) - len(q)
    return float(sum(log_probs[start + j - 1, t] for j, t in enumerate(q)) / len(q))


def test_query_likelihood_scores_equal_hand_computation(chatty_model):
    results = chatty_model.rerank(QUERY, DOCS, batch_size=2, instruction="Find answers.", scoring="query_likelihood")
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    for r in results:
        expected = _hand_query_likelihood(chatty_model.backbone, QUERY, r.document, "Find answers.")
        assert r.score == pytest.approx(expected, abs=1e-4)
    assert len({round(r.score, 4) for r in results}) == len(DOCS)
    one = chatty_model.rerank(QUERY, DOCS, batch_size=1, scoring="query_likelihood")
    many = chatty_model.rerank(QUERY, DOCS, batch_size=5, scoring="query_likelihood")
    assert {r.index: r.score for r in one} == pytest.approx({r.index: r.score for r in many}, abs=1e-4)


def test_query_likelihood_prompt_shape(tiny):
    from genembed.generation.query_likelihood import query_likelihood_prompt

    before, after = query_likelihood_prompt(tiny.tokenizer, "Find answers.")
    assert tiny.tokenizer.decode(before) + "DOC" + tiny.tokenizer.decode(after) == (
        "<|im_start|>user\nPassage: DOC\n\nTask: Find answers.\n"
        "Write a query for this task that the passage is relevant to.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_unknown_scoring(chatty_model):
    with pytest.raises(ValueError, match="scoring must be one of"):
        chatty_model.rerank(QUERY, DOCS, scoring="listwise")


def test_probability_is_the_documented_posterior_for_query_likelihood(chatty_model):
    results = chatty_model.rerank(QUERY, DOCS, scoring="query_likelihood", instruction="Find answers.")
    n = len(chatty_model.backbone.tokenizer(QUERY, add_special_tokens=False)["input_ids"])
    # log P(query | doc) = n * mean token log-probability; posterior with a uniform prior over the candidates
    log_p = torch.tensor(
        [n * _hand_query_likelihood(chatty_model.backbone, QUERY, d, "Find answers.") for d in DOCS],
        dtype=torch.float64,
    )
    posterior = torch.exp(log_p - torch.logsumexp(log_p, 0))
    for r in results:
        assert 0.0 <= r.probability <= 1.0
        assert r.probability == pytest.approx(float(posterior[r.index]), abs=1e-4)
    assert sum(r.probability for r in results) == pytest.approx(1.0, abs=1e-5)
    top = chatty_model.rerank(QUERY, DOCS, scoring="query_likelihood", instruction="Find answers.", top_n=2)
    assert [(r.index, r.probability) for r in top] == [(r.index, r.probability) for r in results[:2]]
    assert chatty_model.rerank(QUERY, DOCS[:1], scoring="query_likelihood")[0].probability == pytest.approx(1.0)


def test_probability_is_p_yes_over_yes_or_no_for_yes_no(chatty_model):
    tok = chatty_model.backbone.tokenizer
    yes, no = answer_token_ids(tok)
    results = chatty_model.rerank(QUERY, DOCS, scoring="yes_no", instruction="Judge relevance.")
    for r in results:
        prompt = rerank_prompt(tok, QUERY, "Judge relevance.")
        ids = prompt.prefix + tok(r.document, add_special_tokens=False)["input_ids"] + prompt.suffix
        with torch.no_grad():
            probs = torch.softmax(chatty_model.backbone.model(torch.tensor([ids])).logits[0, -1].double(), dim=-1)
        assert r.probability == pytest.approx(float(probs[yes] / (probs[yes] + probs[no])), abs=1e-4)
        alone = chatty_model.rerank(QUERY, [r.document], scoring="yes_no", instruction="Judge relevance.")[0]
        assert alone.probability == pytest.approx(r.probability, abs=1e-5)  # judged on its own


def test_relevance_probabilities_checks_its_arguments():
    from genembed.generation.rerank import relevance_probabilities

    scores = torch.tensor([-1.0, -2.0])
    assert relevance_probabilities(scores, "yes_no", 3).tolist() == pytest.approx(torch.sigmoid(scores).tolist())
    assert relevance_probabilities(scores, "query_likelihood", 2).tolist() == pytest.approx(
        torch.softmax(2 * scores, 0).tolist()
    )
    with pytest.raises(ValueError, match="scoring must be one of"):
        relevance_probabilities(scores, "listwise", 2)
    with pytest.raises(ValueError, match="query_tokens must be >= 1"):
        relevance_probabilities(scores, "query_likelihood", 0)
