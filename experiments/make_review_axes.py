"""Instruction-conflict training data: the same reviews, two axes, two instructions.

The shared training files give every text one instruction, so nothing teaches a model that the
instruction decides which neighbours are right. This script has the backbone itself write short
reviews whose sentiment (positive / negative) and item type (a movie, a hotel, a phone, ...) are
known from the prompt (replies that do not name their item type or do not lean to their sentiment by
a small word list are dropped: the 135M model's replies are noisy), then builds contrastive files
from the same reviews:

- ``reviews_sentiment.jsonl``: a sentiment instruction; the positive is a review with the same
  sentiment of *another* item type, the hard negative a review of the *same* item type with the
  opposite sentiment;
- ``reviews_topic.jsonl``: an item-type instruction; the positive is a review of the same item type
  with the opposite sentiment, the hard negative a review of another item type with the same sentiment;
- ``reviews_mixed.jsonl``: both files' rows, labels prefixed by axis, so one batch holds both instructions.

So under one instruction two reviews are neighbours and under the other they are not. Every row
carries its class as ``label`` (the sentiment, or the item type), so training does not use another
review of the same class as an in-batch negative: a binary sentiment batch would otherwise hold
about half false negatives. Train on the files with ``symmetric: true`` (documents get the row's
instruction, as clustering embeds every text with the same one). No evaluation text is used; the
instructions are worded in several ways.

A second, independent sentiment judge cleans the 135M model's replies: with ``--vader`` (the
default, 0.3) a review is kept only if VADER's compound score (the ``vaderSentiment`` lexicon, in the
``genembed[data]`` extra) is at least that far on the prompted side; ``--vader 0`` switches it off.

    python experiments/make_review_axes.py --out runs/review-axes

Generation is resumable (``generate_responses`` keeps a ``.partial`` file); the two JSONL files are
written atomically at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
from pathlib import Path

# item type -> words of which a review of it must contain one (a reply about something else is dropped)
ITEMS = {
    "movie": ("movie", "film", "cinema"),
    "novel": ("novel", "book", "author"),
    "TV series": ("series", "show", "episode", "season"),
    "music album": ("album", "song", "music", "track"),
    "video game": ("game", "gameplay"),
    "restaurant": ("restaurant", "food", "meal", "dish", "menu"),
    "hotel": ("hotel", "room", "stay"),
    "smartphone": ("phone", "smartphone"),
    "laptop": ("laptop", "computer"),
    "pair of headphones": ("headphone", "sound", "audio"),
    "vacuum cleaner": ("vacuum", "cleaner", "suction"),
    "pair of running shoes": ("shoe", "running"),
    "coffee maker": ("coffee",),
    "airline flight": ("flight", "airline", "plane"),
    "mobile app": ("app", "application"),
    "dentist": ("dentist", "dental", "teeth", "tooth"),
}
# sentiment -> stems that signal it; a review must hold more of its own label's than of the other's
POLARITY = {
    "positive": "great excellent amazing love enjoy perfect wonderful fantastic outstanding exceptional impress "
    "recommend delight best beautiful superb happy brilliant comfortable friendly delicious thrill "
    "incredible awesome pleasant glad worth",
    "negative": "waste disappoint terrible awful poor bad worst boring frustrat broke rude unprofessional regret "
    "unacceptable horrible lack dull mediocre overpriced uncomfortable unimpress disaster shallow "
    "predictable useless annoying never unfortunately fail",
}
REASONS = {
    "positive": [
        "it was excellent value for money",
        "it was even better than you hoped",
        "you would happily recommend it to a friend",
        "it was a delight from start to finish",
        "everything about it worked perfectly",
        "you loved it and would gladly go back to it",
    ],
    "negative": [
        "it was a waste of money",
        "it was a big disappointment",
        "you would warn your friends to stay away from it",
        "it was boring and frustrating",
        "nothing about it worked as promised",
        "you regret choosing it",
    ],
}
WRITERS = ["a student", "a busy parent", "a retired teacher", "a frequent traveller", "a critic", "an engineer"]
INSTRUCTIONS = {
    "sentiment": [
        "Given a review, retrieve another review that expresses the same sentiment, positive or negative.",
        "Represent the review by whether the writer liked or disliked what they describe.",
        "Identify the opinion polarity of the review.",
    ],
    "topic": [
        "Given a review, retrieve another review of the same kind of item or service.",
        "Represent the review by what kind of thing it is about.",
        "Identify the type of item or service the review discusses.",
    ],
}
_PROMPT = (
    "Write a short {sentiment} review, one or two sentences, of a {item}, written by {writer}. "
    "Say that {reason}. Write only the review."
)
_PREFIX = re.compile(r"^(here('s| is)[^:\n]*:|review:)\s*", re.IGNORECASE)
_META = re.compile(r"\b(one-sentence|this review|the review|a review)\b", re.IGNORECASE)


def prompts() -> dict[str, tuple[str, str]]:
    """Every prompt with its (sentiment, item) labels."""
    out = {}
    for sentiment, item, writer in itertools.product(REASONS, ITEMS, WRITERS):
        for reason in REASONS[sentiment]:
            text = _PROMPT.format(sentiment=sentiment, item=item, writer=writer, reason=reason)
            out[text] = (sentiment, item)
    return out


def clean(response: str, sentiment: str, item: str) -> str | None:
    """The review alone (a leading "Here's a review:" and quotes removed, cut to two sentences), or
    None for a reply that talks about the review instead of being one, does not name its item type,
    does not lean to its sentiment by :data:`POLARITY`, or is too short."""
    text = _PREFIX.sub("", response.strip()).strip().strip('"').strip()
    text = " ".join(" ".join(re.split(r"(?<=[.!?])\s+", " ".join(text.split()))[:2]).split())
    lower = text.lower()
    if _META.search(text) or len(text) < 20 or not any(word in lower for word in ITEMS[item]):
        return None
    words = re.findall(r"[a-z]+", lower)
    hits = {
        label: sum(any(w.startswith(stem) for stem in stems.split()) for w in words)
        for label, stems in POLARITY.items()
    }
    other = "negative" if sentiment == "positive" else "positive"
    return text if hits[sentiment] > hits[other] else None


def vader_agrees(texts: list[str], sentiments: list[str], threshold: float) -> list[bool]:
    """Whether VADER's compound score lies at least ``threshold`` on each text's prompted side."""
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    except ImportError as err:
        raise SystemExit(
            "--vader needs the vaderSentiment package: pip install 'genembed[data]' (or --vader 0)"
        ) from err
    analyzer = SentimentIntensityAnalyzer()
    scores = [analyzer.polarity_scores(text)["compound"] for text in texts]
    return [
        score >= threshold if s == "positive" else score <= -threshold
        for score, s in zip(scores, sentiments, strict=True)
    ]


def build_rows(reviews: list[tuple[str, str, str]], seed: int) -> dict[str, list[dict]]:
    """Sentiment and topic rows from (text, sentiment, item) reviews."""
    rng = random.Random(seed)
    by = {}
    for text, sentiment, item in reviews:
        by.setdefault((sentiment, item), []).append(text)
    rows: dict[str, list[dict]] = {"sentiment": [], "topic": []}
    for text, sentiment, item in reviews:
        other_sentiment = "negative" if sentiment == "positive" else "positive"
        other_items = [i for i in ITEMS if i != item and by.get((sentiment, i))]
        same_item_opposite = by.get((other_sentiment, item), [])
        if not other_items or not same_item_opposite:
            continue
        same_sentiment_other_item = rng.choice(by[(sentiment, rng.choice(other_items))])
        opposite_same_item = rng.choice(same_item_opposite)
        rows["sentiment"].append(
            {
                "query": text,
                "pos": [same_sentiment_other_item],
                "neg": [opposite_same_item],
                "instruction": rng.choice(INSTRUCTIONS["sentiment"]),
                "label": sentiment,
            }
        )
        other_item_same_sentiment = rng.choice(by[(sentiment, rng.choice(other_items))])
        rows["topic"].append(
            {
                "query": text,
                "pos": [opposite_same_item],
                "neg": [other_item_same_sentiment],
                "instruction": rng.choice(INSTRUCTIONS["topic"]),
                "label": item,
            }
        )
    return rows


def mixed_rows(rows: dict[str, list[dict]]) -> list[dict]:
    """Both axes' rows in one list, each label prefixed by its axis (``sentiment:positive``), for a
    file whose batches hold both instructions at once."""
    return [{**row, "label": f"{axis}:{row['label']}"} for axis, axis_rows in rows.items() for row in axis_rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/review-axes"))
    parser.add_argument("--limit", type=int, default=None, help="reviews to generate (default: one per prompt, 1,152)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--vader", type=float, default=0.3, help="VADER agreement threshold (0: keep every review)")
    args = parser.parse_args()

    import genembed
    from genembed._files import atomic_write_text as atomic_write
    from genembed.training.selfgen import generate_responses

    labels = prompts()
    args.out.mkdir(parents=True, exist_ok=True)
    generated = args.out / "generated.jsonl"
    if not generated.is_file():
        backbone = genembed.load(adapter=False, dtype=args.dtype).backbone
        generate_responses(
            backbone,
            list(labels),
            generated,
            max_new_tokens=64,
            batch_size=args.batch_size,
            temperature=args.temperature,
            top_p=0.95,
            seed=args.seed,
            limit=args.limit,
        )
    reviews, dropped = [], 0
    for line in generated.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        text = clean(row["response"], *labels[row["prompt"]])
        if text is None:
            dropped += 1
            continue
        reviews.append((text, *labels[row["prompt"]]))
    disagreed = 0
    if args.vader > 0:
        keep = vader_agrees([r[0] for r in reviews], [r[1] for r in reviews], args.vader)
        disagreed = keep.count(False)
        reviews = [r for r, k in zip(reviews, keep, strict=True) if k]
    rows = build_rows(reviews, args.seed)
    for name, file_rows in {**rows, "mixed": mixed_rows(rows)}.items():
        lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in file_rows)
        atomic_write(args.out / f"reviews_{name}.jsonl", lines)
    print(
        json.dumps(
            {
                "reviews": len(reviews),
                "dropped": dropped,
                "vader_disagreed": disagreed,
                **{k: len(v) for k, v in rows.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
