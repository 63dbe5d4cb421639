"""Generative reranking of a GritLM-format model with the GRIT authors' prompt (tiny Mistral)."""

from __future__ import annotations

import torch

from genembed.generation.grit_rerank import grit_answer_ids, grit_rerank_prompt

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "The quick brown fox jumps over the lazy dog.", "I love this movie."]


def test_the_prompt_is_the_grit_authors_one():
    assert grit_rerank_prompt("q?", "p.") == (
        "<|user|>\nGiven a query and a passage, judge whether the passage is relevant to the query or not.\n\n"
        "Query: q?\nPassage: p.\n\nAnswer with yes if the passage is relevant to the query, and no otherwise.\n"
        "<|assistant|>\nAnswer:"
    )


def test_yes_no_scores_are_log_odds_after_the_grit_prompt(grit_model):
    model = grit_model("mistral")
    results = model.rerank(QUERY, DOCS, scoring="yes_no")
    tok, lm = model.backbone.tokenizer, model.backbone.model
    shared, yes, no = grit_answer_ids(tok)  # the tiny vocabulary has no " yes": shared " " then "y" / "n"
    for result in results:  # a full causal pass over the whole prompt, tokenized as GritLM does (BOS)
        ids = tok(grit_rerank_prompt(QUERY, result.document))["input_ids"] + list(shared)
        assert ids[0] == tok.bos_token_id
        with torch.no_grad():
            logits = lm(torch.tensor([ids])).logits[0, -1, [yes, no]].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        assert abs(result.score - float(log_probs[0] - log_probs[1])) < 1e-4
    assert len({round(r.score, 4) for r in results}) == len(DOCS)  # the documents are told apart
    model.prompt_format = "plain"  # genembed's own yes/no prompt gives other scores
    plain = {r.index: r.score for r in model.rerank(QUERY, DOCS, scoring="yes_no")}
    assert any(abs(plain[r.index] - r.score) > 1e-3 for r in results)


def test_query_likelihood_asks_in_gritlm_turn(grit_model):
    from genembed.generation.query_likelihood import query_likelihood_prompt

    model = grit_model("mistral")
    tok = model.backbone.tokenizer
    before, after = query_likelihood_prompt(tok, "Find answers.", "gritlm")
    assert before[0] == tok.bos_token_id and tok.decode(before[1:]) == "<|user|>\nPassage: "
    assert tok.decode(after).endswith("\n<|assistant|>\n")
    assert [r.index for r in model.rerank(QUERY, DOCS)]  # the default scoring runs in this format
