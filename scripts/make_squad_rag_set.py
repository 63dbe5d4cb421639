"""Write the ``squad`` question set of ``benchmarks/rag_quality.py`` from SQuAD 2.0's dev file.

The set is a seeded sample of the *answerable* questions of the first five articles of SQuAD 2.0 dev
(Rajpurkar, Jia and Liang, 2018; CC BY-SA 4.0): Normans, Computational_complexity_theory,
Southern_California, Sky_(United_Kingdom) and Victoria_(Australia), 705 answerable questions over 173
paragraphs. The corpus is every paragraph of those articles, so a question's passage has to be found
among the other paragraphs of the same article, not among unrelated text. No genembed training file
holds SQuAD (``../shared/data/README.md`` lists their sources).

Where the file came from: a copy of SQuAD 2.0 dev holding those five articles, committed as
``dev-v1.1.json`` in the public repository VinACE/san_mrc (commit 74f10c5; its ``"version"`` field says
v2.0). The official file (``dev-v2.0.json``) gives the same set: the script keeps only the five titles.

Run (writes ``benchmarks/data/squad_dev_questions.jsonl`` and ``benchmarks/data/squad_dev_passages.jsonl``):

    python scripts/make_squad_rag_set.py PATH/TO/dev-v2.0.json --questions 240 --seed 42
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

TITLES = ("Normans", "Computational_complexity_theory", "Southern_California", "Sky_(United_Kingdom)")
TITLES += ("Victoria_(Australia)",)
OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "data"


def read_articles(path: Path) -> list[dict]:
    """The five articles of :data:`TITLES`, in that order; SystemExit naming any that are missing."""
    data = json.loads(path.read_text("utf-8"))
    by_title = {article["title"]: article for article in data["data"]}
    missing = [title for title in TITLES if title not in by_title]
    if missing:
        raise SystemExit(f"{path}: no article titled {missing} (expected SQuAD 2.0 dev)")
    return [by_title[title] for title in TITLES]


def build(articles: list[dict], n_questions: int, seed: int) -> tuple[list[dict], list[dict]]:
    """``(questions, passages)``: every paragraph as a passage, and ``n_questions`` answerable questions
    sampled with ``seed``, each with its distinct gold answers and its paragraph's id."""
    passages, questions = [], []
    for article in articles:
        title = article["title"].replace("_", " ")
        for n, paragraph in enumerate(article["paragraphs"]):
            pid = f"{article['title']}-{n}"
            passages.append({"id": pid, "title": title, "text": paragraph["context"].strip()})
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa["answers"]:
                    continue
                answers = list(dict.fromkeys(a["text"].strip() for a in qa["answers"]))
                questions.append({"id": qa["id"], "question": qa["question"].strip(), "answers": answers, "doc": pid})
    if n_questions > len(questions):
        raise SystemExit(f"asked for {n_questions} questions; the articles hold {len(questions)} answerable ones")
    sample = random.Random(seed).sample(questions, n_questions)
    return sorted(sample, key=lambda q: q["id"]), passages


def write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), "utf-8")
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("squad_dev", type=Path, help="SQuAD 2.0 dev JSON")
    parser.add_argument("--questions", type=int, default=240)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    questions, passages = build(read_articles(args.squad_dev), args.questions, args.seed)
    write_jsonl(OUT / "squad_dev_questions.jsonl", questions)
    write_jsonl(OUT / "squad_dev_passages.jsonl", passages)
    print(f"{len(questions)} questions over {len(passages)} passages -> {OUT}")


if __name__ == "__main__":
    main()
