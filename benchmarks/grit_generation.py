"""Does joint (GRIT) training keep generation alive? Perplexity and fixed-prompt answers, before vs after.

For each model (the raw backbone; the shipped default adapter, run for generation; and each ``--adapter``
given, e.g. an earlier stage ``runs/teacher-stage-11-bf16`` trained for embeddings alone, or the GRIT
jointly trained ``runs/grit-smollm2``) it measures, with the adapter active in generation:

- ``heldout_ppl``: perplexity of the response tokens of held-aside generative data (chat format; by
  default ``runs/selfgen-heldout.jsonl``, written by ``genembed make-gen-data --offset``, so its prompts
  were never trained on);
- ``text_ppl``: perplexity of plain human-written text no model was trained on (the first 128 tokens of
  the first ``--texts`` SciFact dev abstracts);
- the greedy answers to a few fixed prompts, at the library's decoding defaults, and ``loop_rate``: the
  share of them that repeat a word 4-gram more than twice (:func:`genembed.generation.repetition.loop_rate`).

Run (one thread, a few minutes; under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/grit_generation.py \\
        --adapter runs/grit-smollm2 --out benchmarks/results/grit_generation

Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from _run_info import REPO, git_commit

SCIFACT = REPO.parent / "shared" / "data" / "dev" / "scifact-dev" / "corpus.jsonl"
PROMPTS = [
    "What is the capital of France?",
    "Give me three tips for staying healthy.",
    "Explain in one sentence what photosynthesis is.",
    "Write a haiku about the sea.",
]


@torch.inference_mode()
def perplexity(model, items: list[tuple[list[int], list[int]]], batch_size: int = 8) -> float:
    """exp(mean next-token loss) over every labelled token of ``items`` (ids, labels)."""
    from genembed.training.data.generative import collate_generative
    from genembed.training.forward import response_logits

    pad = model.backbone.tokenizer.pad_token_id
    total, count = 0.0, 0
    for start in range(0, len(items), batch_size):
        batch = collate_generative(items[start : start + batch_size], pad)
        logits, targets, _ = response_logits(model.backbone.model, batch)
        total += float(torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum"))
        count += int(targets.numel())
    return math.exp(total / count)


def heldout_items(tokenizer, path: Path, max_length: int) -> list[tuple[list[int], list[int]]]:
    from genembed.training.data.generative import read_generative, tokenize_chat

    items = [tokenize_chat(tokenizer, row, max_length) for row in read_generative(path)]
    return [item for item in items if item is not None]


def text_items(tokenizer, n: int, max_length: int) -> list[tuple[list[int], list[int]]]:
    items = []
    for line in SCIFACT.read_text(encoding="utf-8").splitlines()[:n]:
        row = json.loads(line)
        ids = tokenizer(f"{row.get('title', '')}\n{row['text']}".strip(), add_special_tokens=False)["input_ids"]
        ids = ids[:max_length]
        items.append((ids, ids))
    return items


def measure(name: str, model, heldout, texts, max_new_tokens: int) -> dict:
    from genembed.generation.repetition import loop_rate

    start = time.perf_counter()
    model.generation_adapter = "adapter"  # run generation on the weights under test
    row = {
        "model": name,
        "heldout_ppl": round(perplexity(model, heldout), 3),
        "text_ppl": round(perplexity(model, texts), 3),
        "answers": {p: model.generate(p, max_new_tokens=max_new_tokens, temperature=0.0) for p in PROMPTS},
    }
    row["loop_rate"] = loop_rate(row["answers"].values())
    row["seconds"] = round(time.perf_counter() - start, 1)
    print(f"{name}: held-out ppl {row['heldout_ppl']}, text ppl {row['text_ppl']}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", action="append", default=[], help="adapter folder (repeatable)")
    parser.add_argument("--heldout", type=Path, default=REPO / "runs" / "selfgen-heldout.jsonl")
    parser.add_argument("--texts", type=int, default=100, help="SciFact dev abstracts for text perplexity")
    parser.add_argument("--max-length", type=int, default=192)
    parser.add_argument("--max-new-tokens", type=int, default=128, help="long enough for a loop to show")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "grit_generation")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import genembed
    from genembed.models.adapters import DEFAULT_ADAPTER, trained_for_generation

    raw = genembed.load(adapter=False, dtype="float32")
    heldout = heldout_items(raw.backbone.tokenizer, args.heldout, args.max_length)
    texts = text_items(raw.backbone.tokenizer, args.texts, 128)
    rows = [measure("raw backbone", raw, heldout, texts, args.max_new_tokens)]
    del raw
    shipped = "generates too" if trained_for_generation(DEFAULT_ADAPTER) else "embedding-only"
    candidates = [(f"shipped default adapter ({shipped})", DEFAULT_ADAPTER)]
    candidates += [(f"adapter {a}", Path(a)) for a in args.adapter]
    for name, folder in candidates:
        model = genembed.load(adapter=folder, dtype="float32")
        row = measure(name, model, heldout, texts, args.max_new_tokens)
        row["trained_for_generation"] = trained_for_generation(folder)
        rows.append(row)
    result = {
        "command": "python benchmarks/grit_generation.py " + " ".join(f"--adapter {a}" for a in args.adapter),
        "git_commit": git_commit(),
        "heldout": {"path": str(args.heldout), "conversations": len(heldout)},
        "texts": {"path": str(SCIFACT), "count": len(texts), "tokens_each": 128},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    lines = ["| model | held-out answer ppl | SciFact text ppl | answers that loop |", "|---|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['heldout_ppl']:.2f} | {r['text_ppl']:.2f} | {r['loop_rate']:.2f} |" for r in rows]
    for prompt in PROMPTS:
        lines += ["", f"**{prompt}**", ""]
        lines += [f"- {r['model']}: {r['answers'][prompt]!r}" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
