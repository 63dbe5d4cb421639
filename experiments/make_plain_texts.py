"""Plain text for the joint stage's KL to the base weights: documents of the training files, ``{"text"}`` lines.

The joint stage (configs/joint-stage.yaml) keeps generation by distilling the base weights' next-token
distributions (``generative.loss: base_kl``) on two kinds of text: the base model's own chat answers
(``genembed make-gen-data``) and plain prose, so that the adapter keeps reading continuous text as the base
model does (chat data alone lets plain-text perplexity drift: the joint adapter trained with a next-token
loss on chat answers reads SciFact abstracts at 35.5 against the base's 30.7, benchmarks/results/joint_generation.md).

Documents of at least ``--min-words`` words, ``--per-file`` from each of the training files given (news,
medical answers, paper abstracts; no dev-task data), drawn with a fixed seed, written atomically:

    python experiments/make_plain_texts.py --out runs/plain-texts.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from genembed._files import atomic_write_text
from genembed.training.data import read_contrastive

TRAIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "train"
FILES = ("bbc", "reuters", "medquad", "pubmedqa", "covidqa", "scitldr")


def plain_texts(paths: list[Path], per_file: int, min_words: int, seed: int) -> list[str]:
    """``per_file`` distinct documents of at least ``min_words`` words from each file, in file order."""
    rng = random.Random(seed)
    texts: list[str] = []
    for path in paths:
        documents = sorted({doc for row in read_contrastive(path) for doc in row.pos})
        long = [doc for doc in documents if len(doc.split()) >= min_words]
        if len(long) < per_file:
            raise SystemExit(f"{path}: {len(long)} documents of {min_words}+ words, fewer than --per-file {per_file}")
        texts += rng.sample(long, per_file)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--files", nargs="+", type=Path, default=[TRAIN / f"{name}.jsonl" for name in FILES])
    parser.add_argument("--per-file", type=int, default=100)
    parser.add_argument("--min-words", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    texts = plain_texts(args.files, args.per_file, args.min_words, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    print(f"wrote {len(texts)} texts to {args.out}")


if __name__ == "__main__":
    main()
