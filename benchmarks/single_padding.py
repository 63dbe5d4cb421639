"""Padding in single-text GradCache steps: chunks as drawn vs chunks shortest first (``length_sorted``).

A single-text step of the teacher stages embeds ``single.batch_size`` texts in chunks of
``train.grad_cache_chunk`` (each chunk trimmed to its longest text), twice (the cached pass and the pass
with gradients). The work per chunk is about its token cells (rows x padded length: at 64 tokens the
feed-forward dominates, not attention). This counts the cells of real single-text batches, drawn as
the stage draws them, chunked in the drawn order and after sorting by length; tokenizer only, seconds.

    .venv/bin/python benchmarks/single_padding.py --config configs/teacher-stage.yaml \\
        --out benchmarks/results/single_padding.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "teacher-stage.yaml")
    parser.add_argument("--batches", type=int, default=50, help="single-text batches drawn")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import genembed
    from genembed.training.config import load_config
    from genembed.training.data import SingleStream, expand_files
    from genembed.training.forward import tokenize_texts
    from genembed.training.grad_cache import length_sorted, split_batch

    cfg = load_config(args.config)
    stream = SingleStream(expand_files(cfg.single.files), batch_size=cfg.single.batch_size, seed=cfg.train.seed)
    tokenizer = genembed.load(adapter=False).backbone.tokenizer
    chunk = cfg.train.grad_cache_chunk or cfg.single.batch_size
    fmt = cfg.embedding.settings().prompt_format

    def cells(batch) -> int:
        return sum(part.input_ids.numel() for part in split_batch(batch, chunk))

    drawn, ordered, tokens = [], [], []
    for _ in range(args.batches):
        texts = stream.next()
        batch = tokenize_texts(tokenizer, texts, [""] * len(texts), prompt_format=fmt, max_length=cfg.single.max_length)
        drawn.append(cells(batch))
        ordered.append(cells(length_sorted(batch)[0]))
        tokens.append(int(batch.attention_mask.sum()))
    ratio = sum(ordered) / sum(drawn)
    print(
        f"{args.batches} batches of {cfg.single.batch_size} texts, chunks of {chunk}: token cells per batch "
        f"{statistics.mean(drawn):.0f} as drawn, {statistics.mean(ordered):.0f} shortest first ({ratio:.2f}x), "
        f"{statistics.mean(tokens):.0f} real tokens"
    )
    if args.out is not None:
        report = {
            "benchmark": "single_padding",
            "config": {"config": str(args.config), "batches": args.batches, "chunk": chunk},
            "cells_drawn": drawn,
            "cells_sorted": ordered,
            "tokens": tokens,
            "sorted_over_drawn": ratio,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
