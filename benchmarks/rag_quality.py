"""RAG answer quality per KV caching mode, against no RAG and plain RAG, on a small WikiQA set.

Data: ``../shared/data/train/wikiqa.jsonl`` (questions whose answer is one Wikipedia sentence). A
seeded sample of questions is drawn; the corpus is every candidate sentence of those questions (the
answer sentences and WikiQA's non-answer sentences for the same question), indexed with
``--store-kv`` (float16, the CLI default) using ``--method``. Two settings:

- ``retrieved``: the prompt holds the ``--top-k`` retrieved sentences (what ``genembed ask`` does);
- ``oracle``: the first gold sentence plus the ``top-k - 1`` best retrieved non-gold ones, the gold one
  at a seeded random place among them. The raw model retrieves poorly, so this is where the caching
  modes' cost in reading a passage that holds the answer shows.

In each setting each question is answered, greedily, by:

- ``no_rag``: the question alone in the chat template (what ``model.generate(question)`` does);
- ``none_doc_first`` / ``none_query_first``: plain RAG, every prompt token computed causally;
- ``query``, ``doc``, ``querydoc``, ``docquery``: the same prompt with KV states taken from the
  embedding passes (see ``genembed.retrieval.context``); each is compared with the plain-RAG row of
  the same order, which has exactly the same tokens.

Scores per variant: answer F1 (SQuAD-style token F1 between the answer and the best gold sentence),
and gold NLL (mean negative log-likelihood per token of the first gold sentence, teacher-forced after
the prompt: lower is better; it measures how much the context helps without depending on sampling).
``retrieved`` is also reported over the questions whose gold sentence was retrieved (retrieval hit).

Run (one method per locked run; about 20 minutes each on 2 busy CPU cores):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/rag_quality.py --method mean
    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/rag_quality.py --method grit
    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/rag_quality.py --method gircse

With a GRIT jointly trained adapter (one set of weights for retrieval, KV states and generation):

    .venv/bin/python benchmarks/rag_quality.py --method grit --adapter runs/grit-smollm2
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import statistics
import string
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
WIKIQA = REPO.parent / "shared" / "data" / "train" / "wikiqa.jsonl"
VARIANTS = {  # name -> (cache mode, order); no_rag has no retrieval
    "no_rag": (None, None),
    "none_doc_first": ("none", "doc_first"),
    "none_query_first": ("none", "query_first"),
    "query": ("query", None),
    "querydoc": ("querydoc", None),
    "doc": ("doc", None),
    "docquery": ("docquery", None),
}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _normalize(text: str) -> list[str]:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between two strings."""
    pred, ref = _normalize(prediction), _normalize(gold)
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _load(n_questions: int, seed: int) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in WIKIQA.read_text("utf-8").splitlines() if line.strip()]
    rows = random.Random(seed).sample(rows, n_questions)
    questions, docs = [], []
    for qi, row in enumerate(rows):
        gold_ids = []
        for kind, texts in (("pos", row["pos"]), ("neg", row["neg"])):
            for j, text in enumerate(texts):
                doc_id = f"q{qi}-{kind}{j}"
                docs.append({"id": doc_id, "title": "", "text": text})
                if kind == "pos":
                    gold_ids.append(doc_id)
        questions.append({"question": row["query"], "gold": row["pos"], "gold_ids": gold_ids})
    return questions, docs


@torch.inference_mode()
def gold_nll(model, context, gold_ids: list[int]) -> float:
    """Mean NLL per token of ``gold_ids`` right after the prompt (the context's cache is not touched)."""
    from genembed.backbone.attention import run_decoder
    from genembed.retrieval.context import fresh_input

    lm = model.backbone.model
    ids, _, _ = fresh_input(context, "cpu")
    ids = torch.cat([ids, torch.tensor([gold_ids])], dim=1)
    past = context.cached_tokens
    hidden = run_decoder(
        lm,
        input_ids=ids,
        attention_mask=torch.ones((1, past + ids.shape[1]), dtype=torch.long),
        position_ids=torch.arange(past, past + ids.shape[1])[None],
        cache=copy.deepcopy(context.cache),
        use_cache=context.cache is not None,
    ).last_hidden_state
    n = len(gold_ids)
    logits = lm.get_output_embeddings()(hidden[0, -n - 1 : -1]).float()
    return float(torch.nn.functional.cross_entropy(logits, torch.tensor(gold_ids)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="mean", help="index embedding method: gircse, mean or grit")
    parser.add_argument(
        "--adapter", default=None, help="a GRIT jointly trained adapter (used for both modes); default: raw backbone"
    )
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--top-k", type=int, default=2, help="passages per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "rag_quality")
    args = parser.parse_args()

    import genembed
    from genembed.generation.chat import chat_prompt_ids
    from genembed.retrieval.context import Context
    from genembed.retrieval.embed_kv import EmbedConfig
    from genembed.retrieval.index_build import build_index
    from genembed.retrieval.rag import Source, build_context, generate_from_context, retrieve

    torch.set_num_threads(args.threads)
    model = genembed.load(adapter=args.adapter or False, dtype="float32")
    if args.adapter and not model.generation_adapter:
        parser.error(f"{args.adapter} was not trained for generation: KV states cannot be reused across modes")
    tok = model.backbone.tokenizer
    questions, docs = _load(args.questions, args.seed)
    per_question = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "wikiqa.jsonl"
        corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), "utf-8")
        config = EmbedConfig(method=args.method, tau=model.tau, max_length=512)
        index = build_index(model, [corpus], Path(tmp) / "index", config=config, store_kv=True, kv_dtype="float16")
        build_s = time.perf_counter() - t0
        index_stats = {
            "chunks": len(index),
            "mean_tokens_per_chunk": statistics.fmean(c.tokens for c in index.chunks),
            "kv_bytes_on_disk": index.kv_store.nbytes,
            "kv_dtype": index.manifest["kv"]["dtype"],
        }
        rows_by_doc = {c.doc_id: c.row for c in index.chunks}
        place = random.Random(args.seed)
        for n, item in enumerate(questions):
            query, sources = retrieve(model, index, item["question"], top_k=args.top_k + 1, keep_query_kv=True)
            gold = index.chunk(rows_by_doc[item["gold_ids"][0]])
            others = [s for s in sources if index.chunk(s.row).doc_id not in item["gold_ids"]][: args.top_k - 1]
            oracle = list(others)
            oracle.insert(
                place.randrange(len(others) + 1), Source(gold.row, gold.id, gold.doc_id, "", gold.text, "", 0.0)
            )
            settings = {"retrieved": sources[: args.top_k], "oracle": oracle}
            hit = any(index.chunk(s.row).doc_id in item["gold_ids"] for s in settings["retrieved"])
            gold_ids = tok(item["gold"][0], add_special_tokens=False)["input_ids"]
            row = {"question": item["question"], "gold": item["gold"], "hit": hit}
            row["retrieved_ids"] = {k: [s.id for s in v] for k, v in settings.items()}
            for setting, passages in settings.items():
                for name, (mode, order) in VARIANTS.items():
                    if mode is None and setting == "oracle":
                        row[f"oracle/{name}"] = row[f"retrieved/{name}"]  # no passages either way
                        continue
                    if mode is None:
                        context = Context(None, chat_prompt_ids(tok, item["question"]), 0, [])
                    else:
                        context = build_context(model, index, query, passages, mode=mode, order=order)
                    nll = gold_nll(model, context, gold_ids)
                    answer = "".join(generate_from_context(model, context, max_new_tokens=args.max_new_tokens)).strip()
                    f1 = max(token_f1(answer, g) for g in item["gold"])
                    row[f"{setting}/{name}"] = {"answer": answer, "f1": f1, "gold_nll": nll}
            per_question.append(row)
            scores = " ".join(f"{k}={row[f'oracle/{k}']['gold_nll']:.2f}" for k in VARIANTS)
            print(f"[{n + 1}/{len(questions)}] hit={hit} oracle gold NLL: {scores}", flush=True)
    summary = {}
    subsets = {
        "retrieved": ("retrieved", per_question),
        "retrieved_hit": ("retrieved", [r for r in per_question if r["hit"]]),
        "oracle": ("oracle", per_question),
    }
    for subset, (setting, rows) in subsets.items():
        summary[subset] = {"questions": len(rows)}
        for name in VARIANTS:
            cells = [r[f"{setting}/{name}"] for r in rows]
            summary[subset][name] = {
                "f1": 100 * statistics.fmean(c["f1"] for c in cells) if cells else None,
                "gold_nll": statistics.fmean(c["gold_nll"] for c in cells) if cells else None,
            }
    report = {
        "config": {**vars(args), "out": str(args.out), "model": model.name, "data": str(WIKIQA), "corpus": len(docs)},
        "git_commit": _git_commit(),
        "index_build_s": build_s,
        "index": index_stats,
        "total_s": time.perf_counter() - t0,
        "retrieval_hit_rate": statistics.fmean(r["hit"] for r in per_question),
        "summary": summary,
        "per_question": per_question,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"rag_quality_{args.method}{'_' + Path(args.adapter).name if args.adapter else ''}.json"
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print(json.dumps({k: report[k] for k in ("retrieval_hit_rate", "summary")}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
