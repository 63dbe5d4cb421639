"""experiments/make_review_axes.py: cleaning self-written reviews and the two conflicting axes built from them."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="module")
def axes():
    return importlib.import_module("make_review_axes")


def test_every_prompt_is_labelled_and_distinct(axes):
    labels = axes.prompts()
    assert len(labels) == 2 * len(axes.ITEMS) * len(axes.WRITERS) * 6
    prompt, (sentiment, item) = next(iter(labels.items()))
    assert sentiment in prompt and item in prompt


def test_clean_keeps_a_review_and_drops_meta_off_topic_and_wrong_polarity_replies(axes):
    reply = 'Here\'s a short review:\n\n"The hotel was a disaster. The room was dirty.  Staff were rude. Never again."'
    assert axes.clean(reply, "negative", "hotel") == "The hotel was a disaster. The room was dirty."
    assert axes.clean("This review contains a mix of comments about the hotel.", "negative", "hotel") is None
    assert axes.clean("The flight was terrible and the seats were awful.", "negative", "hotel") is None  # no item word
    assert axes.clean("The hotel was wonderful, I loved my stay.", "negative", "hotel") is None  # wrong polarity
    assert axes.clean("The hotel was wonderful, I loved my stay.", "positive", "hotel") is not None


def test_the_two_axes_swap_positives_and_hard_negatives(axes):
    reviews = [
        ("good movie", "positive", "movie"),
        ("bad movie", "negative", "movie"),
        ("good hotel", "positive", "hotel"),
        ("bad hotel", "negative", "hotel"),
        ("lonely good novel", "positive", "novel"),  # no negative novel: no row can contrast it
    ]
    rows = axes.build_rows(reviews, seed=0)
    assert [r["query"] for r in rows["sentiment"]] == ["good movie", "bad movie", "good hotel", "bad hotel"]
    by_query = {r["query"]: r for r in rows["sentiment"]}
    assert by_query["good movie"]["neg"] == ["bad movie"]
    assert by_query["good movie"]["pos"][0] in {"good hotel", "lonely good novel"}
    topic = {r["query"]: r for r in rows["topic"]}
    assert topic["good movie"]["pos"] == ["bad movie"] and topic["bad hotel"]["pos"] == ["good hotel"]
    assert topic["bad hotel"]["neg"] == ["bad movie"]
    assert all(r["instruction"] in axes.INSTRUCTIONS["sentiment"] for r in rows["sentiment"])
    assert all(r["instruction"] in axes.INSTRUCTIONS["topic"] for r in rows["topic"])
    assert [r["label"] for r in rows["sentiment"]] == ["positive", "negative", "positive", "negative"]
    assert [r["label"] for r in rows["topic"]] == ["movie", "movie", "hotel", "hotel"]
    mixed = axes.mixed_rows(rows)
    assert [r["label"] for r in mixed[3:5]] == ["sentiment:negative", "topic:movie"]
    assert [{k: v for k, v in r.items() if k != "label"} for r in mixed] == [
        {k: v for k, v in r.items() if k != "label"} for r in rows["sentiment"] + rows["topic"]
    ]


def test_vader_keeps_only_reviews_that_lean_the_prompted_way(axes):
    texts = [
        "I loved this hotel, the staff were wonderful.",
        "The phone broke after a day, terrible.",
        "It is a phone.",
    ]
    assert axes.vader_agrees(texts, ["positive", "negative", "positive"], 0.3) == [True, True, False]
    assert axes.vader_agrees(texts[:2], ["negative", "positive"], 0.3) == [False, False]
