"""RAG answer quality per KV caching mode, against no RAG and plain RAG, on two small question sets.

Data:

- ``wikiqa``: a seeded sample of ``../shared/data/train/wikiqa.jsonl`` (questions whose answer is one
  Wikipedia sentence); the corpus is every candidate sentence of those questions (answer and
  non-answer sentences);
- ``extractive``: ``benchmarks/data/extractive_qa.jsonl``, 24 short passages hand-written for this
  benchmark (mostly invented places, people and things, so the answer must come from the passage),
  each with a question whose answer is a span of it; the corpus is the 24 passages;
- ``squad``: ``benchmarks/data/squad_dev_{questions,passages}.jsonl``, 240 answerable questions of SQuAD 2.0
  dev (five articles, used nowhere in training; ``scripts/make_squad_rag_set.py`` says how they were
  drawn); the corpus is all 173 paragraphs of those articles, so retrieval has to pick the right
  paragraph of the right article.

Each corpus is indexed with ``--store-kv`` (float16, the CLI default) by the loaded model with its
default embedding settings (``genembed.load()``: the shipped GIRCSE adapter, K=5, centering; the KV
states then come from a second pass with the base weights, which generate). Settings:

- ``retrieved``: the prompt holds the ``--top-k`` retrieved passages (what ``genembed ask`` does);
- ``oracle`` (wikiqa only): the first gold sentence plus the ``top-k - 1`` best retrieved non-gold
  ones, the gold one at a seeded random place, so every question can be answered from its context.

In each setting each question is answered greedily (``ask``'s decoding: no repeated 4-gram in the
answer), by ``no_rag`` (the question alone in the chat template), plain RAG in both orders
(``none_doc_first``, ``none_query_first``) and the four caching modes with their default orders
(``query``, ``doc``, ``docquery``: doc first; ``querydoc``: query first). A cached mode has exactly
the tokens of the plain-RAG row of its order.

Scores: answer F1 (SQuAD token F1 against the best gold answer, x100), ``contains`` (a gold answer
appears in the answer, case-insensitive; extractive set), and gold NLL (mean negative log-likelihood
per token of the first gold answer, teacher-forced after the prompt; lower is better). Also the
retrieval hit rate (a gold passage in the top ``--top-k``) and the index build time and KV size, with
and without stored KV states (``build``: the wikiqa corpus built without KV states, then with them).

Run (about 15 minutes on one thread; the build table from a separate run that computes the
documents' center before timing either build):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_quality.py --threads 1
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_quality.py --threads 1 --sets wikiqa --build-only

Each set's answered questions go to ``<results>.<set>.rows.jsonl`` as they come: a run stopped part way
continues after its last answered question when run again with the same options (the file is removed
once the report is written).

Summaries (means, and each caching variant's paired difference from plain RAG in the same order with
a 95% bootstrap interval over questions) are recomputed from a file's per-question rows with
``--summarize FILE...``.

Against the base weights in the same run: ``--compare-base`` adds ``base_no_rag`` and ``base_doc_first``,
the same questions and passages answered by the raw backbone's weights (``--generator base``), and the
summary's ``vs_base`` holds the paired difference (95% bootstrap interval) of ``no_rag`` and
``none_doc_first`` from them:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_quality.py --threads 1 --sets squad --compare-base \
        --variants no_rag none_doc_first

Other models: ``--adapter none`` (the raw backbone), ``--adapter runs/grit-smollm2 --method grit``.

Selective recomputation (CacheBlend; :mod:`genembed.retrieval.kv_blend`): ``--recompute 0.2`` adds a
variant ``<mode>@0.2`` of every caching mode, recomputing that share of the isolated cached tokens;
``--variants`` runs only the named variants (e.g. the plain rows and the doc-caching modes):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_quality.py --threads 1 --recompute 0.2 \
        --variants none_doc_first none_query_first query doc docquery querydoc \
                   query@0.2 doc@0.2 docquery@0.2 querydoc@0.2
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import re
import statistics
import string
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from _run_info import REPO, git_commit

WIKIQA = REPO.parent / "shared" / "data" / "train" / "wikiqa.jsonl"
EXTRACTIVE = REPO / "benchmarks" / "data" / "extractive_qa.jsonl"
SQUAD = REPO / "benchmarks" / "data" / "squad_dev_{}.jsonl"
SETS = ("wikiqa", "extractive", "squad")
VARIANTS = {  # name -> (cache mode, order); no_rag has no retrieval
    "no_rag": (None, None),
    "none_doc_first": ("none", "doc_first"),
    "none_query_first": ("none", "query_first"),
    "query": ("query", None),
    "doc": ("doc", None),
    "docquery": ("docquery", None),
    "querydoc": ("querydoc", None),
}
# --compare-base: the plain rows again, answered by the base weights; name -> the variant it mirrors
BASE_VARIANTS = {"base_no_rag": "no_rag", "base_doc_first": "none_doc_first"}
# the paired differences a summary reports (statistic, scale): from plain RAG (gap) and from the base weights
PAIRED_STATS = {"gap": (("f1", 100), ("gold_nll", 1)), "vs_base": (("f1", 100), ("contains", 100), ("gold_nll", 1))}


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


def load_wikiqa(n_questions: int, seed: int) -> tuple[list[dict], list[dict]]:
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


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def load_squad() -> tuple[list[dict], list[dict]]:
    docs = _jsonl(Path(str(SQUAD).format("passages")))
    rows = _jsonl(Path(str(SQUAD).format("questions")))
    questions = [{"question": r["question"], "gold": r["answers"], "gold_ids": [r["doc"]]} for r in rows]
    return questions, docs


def load_set(name: str, args) -> tuple[list[dict], list[dict]]:
    """``(questions, docs)`` of one of :data:`SETS`."""
    if name == "wikiqa":
        return load_wikiqa(args.questions, args.seed)
    return load_extractive() if name == "extractive" else load_squad()


def load_extractive() -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in EXTRACTIVE.read_text("utf-8").splitlines() if line.strip()]
    docs = [{"id": r["id"], "title": r["title"], "text": r["text"]} for r in rows]
    questions = [{"question": r["question"], "gold": r["answers"], "gold_ids": [r["id"]]} for r in rows]
    return questions, docs


@torch.inference_mode()
def gold_nll(model, context, gold_ids: list[int]) -> float:
    """Mean NLL per token of ``gold_ids`` right after the prompt (the context's cache is not touched)."""
    from genembed.backbone.attention import run_decoder
    from genembed.generation.adapters import adapter_mode
    from genembed.retrieval.context import fresh_input

    lm = model.backbone.model
    ids, _, _ = fresh_input(context, "cpu")
    ids = torch.cat([ids, torch.tensor([gold_ids])], dim=1)
    past = context.past_tokens
    with adapter_mode(lm, model.generation_adapter):
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


def build(model, docs: list[dict], folder: Path, config, *, store_kv: bool):
    from genembed.retrieval.index_build import build_index

    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), "utf-8")
    t0 = time.perf_counter()
    index = build_index(
        model, [corpus], folder / ("kv" if store_kv else "plain"), settings=config, store_kv=store_kv, overwrite=True
    )
    return index, time.perf_counter() - t0


def variants(recompute: list[float], names: list[str] | None) -> dict[str, tuple[str | None, str | None, float]]:
    """name -> (cache mode, order, share recomputed): VARIANTS, one ``mode@share`` per caching mode and
    share, then only ``names`` (in that order) when given."""
    table = {name: (mode, order, 0.0) for name, (mode, order) in VARIANTS.items()}
    for share in recompute:
        for name in ("query", "doc", "docquery", "querydoc"):
            table[f"{name}@{share:g}"] = (*VARIANTS[name], share)
    if names is None:
        return table
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {', '.join(table)}")
    return {n: table[n] for n in names}


def run_set(
    model, name: str, questions: list[dict], index, settings: tuple[str, ...], args, rows: RowLog | None = None
) -> dict:
    """Answer every question of a set in every variant; with ``rows``, questions answered by an earlier
    run with the same configuration are read back from it instead (retrieval still runs, so the oracle
    placement draws stay those of an uninterrupted run) and each new row is appended to it."""
    from genembed.generation.chat import chat_prompt_ids
    from genembed.retrieval.context import Context
    from genembed.retrieval.rag import Source, build_context, generate_from_context, retrieve

    tok = model.backbone.tokenizer
    rows_by_doc = {c.doc_id: c.row for c in index.chunks}
    place = random.Random(args.seed)
    table = variants(args.recompute, args.variants)
    if args.compare_base:
        table |= {name: (*VARIANTS[mirror], 0.0) for name, mirror in BASE_VARIANTS.items()}
    per_question = []
    for n, item in enumerate(questions):
        query, sources = retrieve(model, index, item["question"], top_k=args.top_k + 1, keep_query_kv=True)
        gold = index.chunk(rows_by_doc[item["gold_ids"][0]])
        others = [s for s in sources if index.chunk(s.row).doc_id not in item["gold_ids"]][: args.top_k - 1]
        oracle = list(others)
        oracle.insert(
            place.randrange(len(others) + 1), Source(gold.row, gold.id, gold.doc_id, gold.title, gold.text, "", 0.0)
        )
        passages = {"retrieved": sources[: args.top_k], "oracle": oracle}
        if rows is not None and n < len(rows.done):
            per_question.append(rows.done[n])
            continue
        hit = any(index.chunk(s.row).doc_id in item["gold_ids"] for s in passages["retrieved"])
        gold_ids = tok(item["gold"][0], add_special_tokens=False)["input_ids"]
        row = {"question": item["question"], "gold": item["gold"], "hit": hit}
        row["retrieved_ids"] = {k: [s.id for s in passages[k]] for k in settings}
        for setting in settings:
            for variant, (mode, order, share) in table.items():
                if mode is None and setting != settings[0]:
                    row[f"{setting}/{variant}"] = row[f"{settings[0]}/{variant}"]  # no passages either way
                    continue
                with generating(model, base=variant in BASE_VARIANTS):
                    if mode is None:
                        context = Context(None, chat_prompt_ids(tok, item["question"]), 0, [])
                    else:
                        context = build_context(
                            model, index, query, passages[setting], mode=mode, order=order, recompute=share
                        )
                    nll = gold_nll(model, context, gold_ids)
                    pieces = generate_from_context(model, context, max_new_tokens=args.max_new_tokens)
                    answer = "".join(pieces).strip()
                row[f"{setting}/{variant}"] = {
                    "answer": answer,
                    "f1": max(token_f1(answer, g) for g in item["gold"]),
                    "contains": any(g.lower() in answer.lower() for g in item["gold"]),
                    "gold_nll": nll,
                }
        per_question.append(row)
        if rows is not None:
            rows.append(row)
        cells = " ".join(f"{v}={row[f'{settings[-1]}/{v}']['f1']:.2f}" for v in table)
        print(f"{name} [{n + 1}/{len(questions)}] hit={hit} {settings[-1]} F1: {cells}", flush=True)
    return {
        "retrieval_hit_rate": statistics.fmean(r["hit"] for r in per_question),
        "summary": summarize(per_question, settings, list(table)),
        "per_question": per_question,
    }


@contextlib.contextmanager
def generating(model, *, base: bool):
    """Within the block, ``model`` generates with the base weights when ``base`` (``--generator base``)."""
    if not base:
        yield
        return
    saved = model.generation_adapter
    model.generation_adapter = "base"
    try:
        yield
    finally:
        model.generation_adapter = saved


class RowLog:
    """The per-question rows of one set written so far, one JSON line each after a header holding the
    run's configuration: a rerun with the same configuration continues after the last complete row; a
    rerun with another starts the file over."""

    def __init__(self, path: Path, config: dict):
        self.path, self.done = path, []
        header = json.dumps(config, sort_keys=True)
        lines = path.read_text("utf-8").splitlines() if path.is_file() else []
        if lines and lines[0] == header:
            for line in lines[1:]:
                try:
                    self.done.append(json.loads(line))
                except json.JSONDecodeError:  # a row cut short by a crash: answered again
                    break
        elif lines:
            print(f"{path}: written by another configuration; starting over", flush=True)
        if self.done:
            print(f"{path}: continuing after {len(self.done)} answered questions", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic = path.with_suffix(".tmp")
        atomic.write_text(header + "\n" + "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in self.done))
        atomic.replace(path)

    def append(self, row: dict) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def plain_reference(variant: str) -> str | None:
    """The plain-RAG variant in the same order as ``variant`` (None for ``no_rag`` and plain RAG itself)."""
    from genembed.retrieval.context import mode_layout

    if variant in BASE_VARIANTS:
        return None
    mode, order = VARIANTS[variant.split("@")[0]]
    if mode in (None, "none"):
        return None
    return f"none_{mode_layout(mode, order)[0]}"


def paired_gap(cells: list[dict], refs: list[dict], key: str, scale: float, *, draws: int = 2000) -> dict:
    """Mean per-question difference ``cells - refs`` of ``key`` (x ``scale``) and its 95% paired
    bootstrap interval (questions resampled with replacement, seeded)."""
    diffs = [scale * (float(c[key]) - float(r[key])) for c, r in zip(cells, refs, strict=True)]
    rng = random.Random(0)
    boots = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(draws))
    return {"mean": statistics.fmean(diffs), "ci95": [boots[int(0.025 * draws)], boots[int(0.975 * draws) - 1]]}


def summarize(per_question: list[dict], settings: tuple[str, ...], names: list[str]) -> dict:
    """Per subset (``retrieved``, ``retrieved_hit``, ``oracle``) and variant: mean F1, contains and gold
    NLL; for a caching variant whose plain-RAG reference ran too, ``gap``: its paired difference from it."""
    subsets = {"retrieved": ("retrieved", per_question)}
    subsets["retrieved_hit"] = ("retrieved", [r for r in per_question if r["hit"]])
    if "oracle" in settings:
        subsets["oracle"] = ("oracle", per_question)
    summary: dict = {}
    for subset, (setting, rows) in subsets.items():
        summary[subset] = {"questions": len(rows)}
        for variant in names:
            cells = [r[f"{setting}/{variant}"] for r in rows]
            entry = {
                key: (scale * statistics.fmean(float(c[key]) for c in cells) if cells else None)
                for key, scale in (("f1", 100), ("contains", 100), ("gold_nll", 1))
            }
            base = next((b for b, mirror in BASE_VARIANTS.items() if mirror == variant), None)
            for key, reference in (("gap", plain_reference(variant)), ("vs_base", base)):
                if cells and reference in names:
                    refs = [r[f"{setting}/{reference}"] for r in rows]
                    entry[key] = {"reference": reference}
                    entry[key] |= {stat: paired_gap(cells, refs, stat, scale) for stat, scale in PAIRED_STATS[key]}
            summary[subset][variant] = entry
    return summary


def resummarize(path: Path) -> None:
    """Rewrite the summaries of a results file from its per-question rows (e.g. after adding a statistic)."""
    report = json.loads(path.read_text("utf-8"))
    if "sets" not in report:
        raise SystemExit(f"{path}: no 'sets' (written by an earlier version of this script); nothing rewritten")
    for result in report["sets"].values():
        if "per_question" not in result:
            continue
        rows = result["per_question"]
        settings = tuple(sorted({k.split("/")[0] for k in rows[0] if "/" in k}, key=("retrieved", "oracle").index))
        names = list(dict.fromkeys(k.split("/", 1)[1] for k in rows[0] if k.startswith(f"{settings[0]}/")))
        result["summary"] = summarize(rows, settings, names)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    tmp.replace(path)
    print(f"rewrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", default=None, help="adapter folder or 'none' (default: the shipped one)")
    parser.add_argument(
        "--generator", default=None, help="generation adapter folder, 'base' or 'adapter' (default: genembed.load's)"
    )
    parser.add_argument("--method", default="gircse", help="index embedding method: gircse, mean, last or grit")
    parser.add_argument("--sets", nargs="+", default=["wikiqa", "extractive"], choices=SETS)
    parser.add_argument(
        "--compare-base", action="store_true", help="also answer no-RAG and plain RAG with the base weights"
    )
    parser.add_argument("--questions", type=int, default=30, help="WikiQA questions")
    parser.add_argument("--top-k", type=int, default=2, help="passages per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--recompute", type=float, nargs="*", default=[], help="shares for <mode>@<share> variants")
    parser.add_argument("--variants", nargs="+", default=None, help="run only these variants (default: all)")
    parser.add_argument("--build-only", action="store_true", help="only the build time and size table")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "rag_quality")
    parser.add_argument(
        "--summarize", type=Path, nargs="+", default=None, help="only rewrite these results files' summaries"
    )
    args = parser.parse_args()
    if args.summarize:
        for path in args.summarize:
            resummarize(path)
        return

    import genembed
    from genembed.encoders.settings import EmbedSettings, IndexEmbedSettings
    from genembed.generation.adapters import generator_choice
    from genembed.retrieval.kv_source import generation_weights

    torch.set_num_threads(args.threads)
    adapter = False if args.adapter == "none" else args.adapter
    model = genembed.load(adapter=adapter, dtype="float32", generation_adapter=generator_choice(args.generator))
    embed = EmbedSettings(method=args.method, tau=model.tau, max_length=512)
    config = IndexEmbedSettings(embed=embed, center=model.center)
    report = {
        "config": {**vars(args), "out": str(args.out), "model": model.name, "embed": config.to_dict()},
        "git_commit": git_commit(),
        "generation_adapter": model.generation_adapter,
        "generation_weights": generation_weights(model),
        "sets": {},
    }
    if config.center:  # compute the documents' center once before any timed build (it is memoised)
        from genembed.encoders.centering import instruction_center

        instruction_center(model.backbone, config.embed, config.doc_instruction)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets:
            questions, docs = load_set(name, args)
            folder = Path(tmp) / name
            folder.mkdir()
            build_stats = {}
            if name == "wikiqa":  # build time and size without and with stored KV states
                plain, seconds = build(model, docs, folder, config, store_kv=False)
                build_stats["without_kv"] = {"seconds": seconds, "bytes": _folder_bytes(plain.path)}
            index, seconds = build(model, docs, folder, config, store_kv=True)
            build_stats["with_kv"] = {
                "seconds": seconds,
                "bytes": _folder_bytes(index.path),
                "kv_bytes": index.kv_store.nbytes,
                "kv_source": index.kv_source,
            }
            print(f"{name}: {len(docs)} passages indexed: {json.dumps(build_stats)}", flush=True)
            if args.build_only:
                report["sets"][name] = {"corpus": len(docs), "chunks": len(index), "build": build_stats}
                continue
            settings = ("retrieved", "oracle") if name == "wikiqa" else ("retrieved",)
            log = RowLog(args.out / f"{run_name(args, model)}.{name}.rows.jsonl", row_config(args, model, name))
            result = run_set(model, name, questions, index, settings, args, log)
            report["sets"][name] = {
                "corpus": len(docs),
                "chunks": len(index),
                "mean_tokens_per_chunk": statistics.fmean(c.tokens for c in index.chunks),
                "build": build_stats,
                **result,
            }
    report["total_s"] = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{run_name(args, model)}.json"
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    for name, result in report["sets"].items():
        print(name, json.dumps({k: result[k] for k in ("retrieval_hit_rate", "summary", "build") if k in result}))
    print(f"wrote {path}")
    for name in args.sets:  # the report holds every row now
        (args.out / f"{run_name(args, model)}.{name}.rows.jsonl").unlink(missing_ok=True)


def run_name(args, model) -> str:
    """The results file's name (without ``.json``): the method, the model and the options that change rows."""
    suffix = ("default" if args.adapter is None else Path(args.adapter).name) + ("_build" if args.build_only else "")
    suffix += "".join(f"_recompute{share:g}" for share in args.recompute)
    suffix += f"_gen-{model.generation_adapter_name}" if model.generation_adapter_name else ""
    suffix += "_" + "-".join(args.sets) if args.sets != ["wikiqa", "extractive"] else ""
    suffix += "_vs-base" if args.compare_base else ""
    return f"rag_quality_{args.method}_{suffix}"


def row_config(args, model, name: str) -> dict:
    """What decides one set's rows: a partial rows file continues only under the same."""
    keys = ("adapter", "generator", "method", "questions", "top_k", "max_new_tokens", "seed", "recompute", "variants")
    keys += ("compare_base",)
    return {"set": name, "model": model.name, **{k: getattr(args, k) for k in keys}}


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


if __name__ == "__main__":
    main()
