"""Can a small LoRA teach the generator to read isolated cached passages? (issue 25, a probe)

Cached RAG modes put passages' KV states side by side that were each computed after the head alone, so
a passage never attended to the ones before it (:mod:`genembed.retrieval.context`). The bundled 135M
model answers worse from such a prompt than from a full causal pass (docs/rag.md). Block-Attention
(Sun et al., ICLR 2025) and TurboRAG fine-tune the model on prompts built that way; this probe tries
the label-free form of it: a LoRA on the generation weights trained so that its next-token
distributions over the answer, given the *cached* layout, match the base weights' given a full causal
pass (``KL(base, full || LoRA, cached)``), the caching mode drawn per example among ``none``,
``query``, ``doc``, ``docquery`` and ``querydoc`` (``none``: the LoRA must leave plain RAG as it was).

The cached layout is built the way :func:`~genembed.retrieval.context.assemble` builds it, but with
gradients: each isolated segment through its own causal pass over ``head + segment``, its keys rotated
to their place, the rest computed on top of that cache (checked against ``assemble`` before training).

Data: questions of ``../shared/data/train/wikiqa.jsonl`` with two passages (a gold sentence and a
non-answer one, in seeded order) and the gold sentence as the teacher-forced answer. Held out (never
trained on): ``--eval-questions`` questions (the first 30 of them are rag_quality.py's WikiQA sample)
and the 24 passages of ``benchmarks/data/extractive_qa.jsonl`` (each with one other passage).
``--train-data FILE`` trains on another file of the training format instead (e.g. covidqa.jsonl, whose
questions are answered by a span of a passage), its passages cut to ``--passage-words``; its gold
passages are long, so pair it with ``--answers teacher`` (the base weights' own greedy answers).

Reported per mode, before and after training, on the held-out questions: the mean gold NLL per token
and its gap to the base weights' full pass (the quantity rag_quality.py reports as gold NLL), and on
the extractive set the greedy answers' F1 (``genembed ask``'s decoding). Run on both cores with nothing
else heavy beside it (39 minutes here with the defaults):

    OMP_NUM_THREADS=2 .venv/bin/python experiments/block_attention_probe.py --threads 2

Writes ``experiments/results/block_attention_probe.json``; the trained LoRA goes to ``--adapter-out``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
import torch
from _run_info import REPO, git_commit
from rag_quality import EXTRACTIVE, WIKIQA, token_f1
from rag_quality import VARIANTS as RAG_VARIANTS
from tqdm import tqdm

# name -> (cache mode, order): rag_quality's plain RAG in both orders and caching modes in their default orders
VARIANTS = {name: layout for name, layout in RAG_VARIANTS.items() if layout[0] is not None}
MODES = ("none", "query", "doc", "docquery", "querydoc")  # drawn in training


def load_examples(args: argparse.Namespace) -> tuple[list[dict], list[dict], list[dict]]:
    """(train, held-out WikiQA, extractive) examples: ``question``, ``passages`` (2), ``answer``, ``golds``."""
    rows = [json.loads(line) for line in WIKIQA.read_text("utf-8").splitlines() if line.strip()]
    eval_rows = random.Random(args.seed).sample(rows, args.eval_questions)  # rag_quality's sample first
    held = {r["query"] for r in eval_rows}
    train_rows = [r for r in rows if r["query"] not in held]
    rng = random.Random(args.seed + 1)
    all_sentences = [s for r in rows for s in r["pos"] + r["neg"]]

    def example(row: dict, pool: list[str]) -> dict:
        gold = row["pos"][0]
        other = rng.choice(row["neg"]) if row["neg"] else rng.choice(pool)  # as the recorded runs drew it
        passages = [gold, other] if rng.random() < 0.5 else [other, gold]
        return {"question": row["query"], "passages": passages, "answer": gold, "golds": row["pos"]}

    train_pool = all_sentences
    if args.train_data is not None:  # another training file (query, pos, neg), passages cut to their first words
        train_rows, train_pool = train_file(args.train_data, args.passage_words)
    picked = rng.sample(train_rows, min(args.train_questions, len(train_rows)))
    train = [example(r, train_pool) for r in picked]
    wikiqa = [example(r, all_sentences) for r in eval_rows]
    extractive_rows = [json.loads(line) for line in EXTRACTIVE.read_text("utf-8").splitlines() if line.strip()]
    extractive = []
    for i, row in enumerate(extractive_rows):
        other = extractive_rows[(i + 1 + rng.randrange(len(extractive_rows) - 1)) % len(extractive_rows)]
        texts = [f"{r['title']} {r['text']}".strip() for r in (row, other)]
        passages = texts if rng.random() < 0.5 else texts[::-1]
        extractive.append(
            {"question": row["question"], "passages": passages, "answer": row["answers"][0], "golds": row["answers"]}
        )
    return train, wikiqa, extractive


def train_file(path: Path, passage_words: int) -> tuple[list[dict], list[str]]:
    """Rows of a training JSONL file (``query``, ``pos``, ``neg``; read and checked as training reads it) with
    every passage cut to its first ``passage_words`` words (0: whole), and the pool of all its passages;
    SystemExit naming a bad line."""
    from genembed.training.data import DataError, read_contrastive

    try:
        read = read_contrastive(path)
    except DataError as exc:
        raise SystemExit(str(exc)) from exc
    cut = (lambda text: " ".join(text.split()[:passage_words])) if passage_words else str.strip
    rows = [{"query": r.query, "pos": [cut(t) for t in r.pos], "neg": [cut(t) for t in r.neg]} for r in read]
    if len({r["query"] for r in rows}) < 2:
        raise SystemExit(f"{path}: needs rows of at least two questions")
    return rows, [t for r in rows for t in r["pos"] + r["neg"]]


def layout(
    tok, prompt, item: dict, mode: str, order: str | None = None
) -> tuple[list[int], list[tuple[list[int], bool]], list[int]]:
    """``(head, [(segment ids, cached)], tail)`` of an example's prompt in ``mode`` (default: its order)."""
    from genembed.retrieval.context import mode_layout

    order, query_cached, docs_cached = mode_layout(mode, order)
    query = (prompt.query_ids(tok, item["question"], order), query_cached)
    docs = [(ids, docs_cached) for ids in prompt.passage_ids(tok, item["passages"])]
    segments = [query, *docs] if order == "query_first" else [*docs, query]
    return prompt.head_ids(tok), segments, prompt.tail_ids(tok)


def _extend(lm, ids: list[int], cache, at: int):
    """Run ``ids`` at positions ``at ..`` causally on top of ``cache`` (extended in place); the decoder's output."""
    from genembed.backbone.attention import run_decoder

    return run_decoder(
        lm,
        input_ids=torch.tensor([ids]),
        attention_mask=torch.ones((1, at + len(ids)), dtype=torch.long),
        position_ids=torch.arange(at, at + len(ids))[None],
        cache=cache,
        use_cache=True,
    )


def prompt_cache(lm, head: list[int], segments: list[tuple[list[int], bool]], *, isolate: bool):
    """``(cache, length)`` of ``head + segments``: a cached segment after another segment is computed
    after the head alone and its keys rotated to its place (as ``assemble`` does), unless ``isolate`` is
    False (one causal pass). Differentiable."""
    from transformers import DynamicCache

    from genembed.retrieval.kv_ops import cache_layers, shift_keys

    cache, past, pending, seen_segment = DynamicCache(), 0, list(head), False
    for ids, cached in segments:
        if isolate and cached and seen_segment:
            if pending:
                _extend(lm, pending, cache, past)
                past, pending = past + len(pending), []
            alone = DynamicCache()
            _extend(lm, list(head) + ids, alone, 0)
            h = len(head)
            for layer, (keys, values) in enumerate(cache_layers(alone)):
                cache.update(shift_keys(lm, keys[:, :, h:], past - h), values[:, :, h:], layer)
            past += len(ids)
        else:
            pending.extend(ids)
        seen_segment = True
    if pending:
        _extend(lm, pending, cache, past)
        past += len(pending)
    return cache, past


def answer_logits(lm, head, segments, tail: list[int], answer: list[int], *, isolate: bool) -> torch.Tensor:
    """``(len(answer), V)`` next-token logits at the positions that predict ``answer`` after the prompt."""
    cache, past = prompt_cache(lm, head, segments, isolate=isolate)
    hidden = _extend(lm, tail + answer, cache, past).last_hidden_state
    return lm.get_output_embeddings()(hidden[0, len(tail) - 1 : -1]).float()


def check_against_assemble(model, prompt, item: dict) -> float:
    """Largest difference between this probe's cached prompt and ``assemble``'s (float32 states)."""
    from genembed.retrieval.context import Segment, assemble
    from genembed.retrieval.kv_ops import cache_layers
    from genembed.retrieval.kv_segment import segment_states

    tok, lm = model.backbone.tokenizer, model.backbone.model
    head, segments, tail = layout(tok, prompt, item, "doc")
    with torch.inference_mode():
        ours, _ = prompt_cache(lm, head, segments, isolate=True)
        kv = segment_states(model, head, [ids for ids, _ in segments[:-1]])[1]
        segs = [Segment("head", head)]
        segs += [Segment(f"p{i}", ids, kv[i], at=len(head)) for i, (ids, _) in enumerate(segments[:-1])]
        context = assemble(lm, [*segs, Segment("query", segments[-1][0])], tail)
        theirs = cache_layers(context.cache)
    n = theirs[0][0].shape[2]  # assemble leaves the last computed segment to the decoder
    return max(
        float((a[..., :n, :] - b).abs().max())
        for (ka, va), (kb, vb) in zip(cache_layers(ours), theirs, strict=True)
        for a, b in ((ka, kb), (va, vb))
    )


@torch.inference_mode()
def teacher_answers(model, prompt, items: list[dict], path: Path, *, max_new_tokens: int) -> None:
    """Replace each item's ``answer`` by the base weights' greedy plain-RAG answer (doc_first, ``ask``'s
    decoding), so that the answers trained on depend on the question. Kept in ``path`` (JSON lines by
    question) and resumed from it."""
    done = {}
    if path.is_file():
        done = {r["question"]: r["answer"] for r in map(json.loads, path.read_text("utf-8").splitlines()) if r}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for item in tqdm(items, desc="teacher answers"):
            if item["question"] not in done:
                text = greedy_answer(model, prompt, item, "none", None, isolate=False, max_new_tokens=max_new_tokens)
                done[item["question"]] = text
                out.write(json.dumps({"question": item["question"], "answer": text}) + "\n")
                out.flush()
            item["answer"] = done[item["question"]] or item["answer"]  # an empty answer keeps the gold one


def answer_ids(tok, text: str) -> list[int]:
    """An answer's token ids as the model should produce it: its text, then the end of the turn."""
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]


def greedy_answer(
    model, prompt, item: dict, mode: str, order: str | None, *, isolate: bool, max_new_tokens: int
) -> str:
    """The answer ``ask``'s decoding gives after the example's prompt (cached layout unless not ``isolate``),
    with the weights ``model.generation_adapter`` chooses."""
    from genembed.generation.adapters import adapter_mode
    from genembed.retrieval.context import Context
    from genembed.retrieval.rag import generate_from_context

    lm = model.backbone.model
    head, segments, tail = layout(model.backbone.tokenizer, prompt, item, mode, order)
    with adapter_mode(lm, model.generation_adapter):
        cache, past = prompt_cache(lm, head, segments, isolate=isolate)
    context = Context(cache, list(tail), past, [])
    return "".join(generate_from_context(model, context, max_new_tokens=max_new_tokens)).strip()


def kl_loss(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """Mean over positions of ``KL(softmax(teacher) || softmax(student))``."""
    log_t = teacher.log_softmax(-1)
    return (log_t.exp() * (log_t - student.log_softmax(-1))).sum(-1).mean()


@torch.inference_mode()
def evaluate(model, prompt, items: list[dict], *, lora: bool, label: str) -> dict:
    """Per mode: mean gold NLL with the cached layout (``lora``: adapter on), and the base full pass's
    (which depends only on the order, so it is computed once per item and order)."""
    from genembed.generation.adapters import adapter_mode
    from genembed.retrieval.context import mode_layout

    tok, lm = model.backbone.tokenizer, model.backbone.model
    base_full: dict[tuple[int, str], float] = {}
    out: dict[str, dict] = {}
    for variant, (mode, order) in tqdm(VARIANTS.items(), desc=f"{label} gold NLL", leave=False):
        cached, full = [], []
        for i, item in enumerate(items):
            head, segments, tail = layout(tok, prompt, item, mode, order)
            answer = answer_ids(tok, item["answer"])
            target = torch.tensor(answer)
            key = (i, mode_layout(mode, order)[0])
            if key not in base_full:
                with adapter_mode(lm, False):
                    logits = answer_logits(lm, head, segments, tail, answer, isolate=False)
                base_full[key] = float(torch.nn.functional.cross_entropy(logits, target))
            full.append(base_full[key])
            with adapter_mode(lm, lora):
                logits = answer_logits(lm, head, segments, tail, answer, isolate=True)
            cached.append(float(torch.nn.functional.cross_entropy(logits, target)))
        gaps = [c - f for c, f in zip(cached, full, strict=True)]
        out[variant] = {
            "gold_nll": statistics.fmean(cached),
            "gold_nll_base_full": statistics.fmean(full),
            "gap": statistics.fmean(gaps),
            "gap_sd": statistics.stdev(gaps) if len(gaps) > 1 else 0.0,
        }
    return out


@torch.inference_mode()
def answers(model, prompt, items: list[dict], *, lora: bool, max_new_tokens: int, label: str) -> dict:
    """Per mode: greedy answers from the cached layout (``ask``'s decoding), their F1 and ``contains``."""
    model.generation_adapter = lora
    out: dict[str, dict] = {}
    for variant, (mode, order) in tqdm(VARIANTS.items(), desc=f"{label} answers", leave=False):
        rows = []
        for item in items:
            text = greedy_answer(model, prompt, item, mode, order, isolate=True, max_new_tokens=max_new_tokens)
            rows.append(
                {
                    "answer": text,
                    "f1": max(token_f1(text, g) for g in item["golds"]),
                    "contains": any(g.lower() in text.lower() for g in item["golds"]),
                }
            )
        out[variant] = {
            "f1": 100 * statistics.fmean(r["f1"] for r in rows),
            "contains": 100 * statistics.fmean(r["contains"] for r in rows),
            "answers": [r["answer"] for r in rows],
            "f1_each": [r["f1"] for r in rows],
        }
    return out


def score(model, prompt, wikiqa: list[dict], extractive: list[dict], *, lora: bool, max_new_tokens: int) -> dict:
    """The held-out scores with the base weights (``lora`` False) or with the LoRA."""
    label = "after" if lora else "before"
    return {
        "wikiqa": evaluate(model, prompt, wikiqa, lora=lora, label=f"{label} wikiqa"),
        "extractive": evaluate(model, prompt, extractive, lora=lora, label=f"{label} extractive"),
        "extractive_answers": answers(model, prompt, extractive, lora=lora, max_new_tokens=max_new_tokens, label=label),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-questions", type=int, default=400)
    parser.add_argument("--eval-questions", type=int, default=60)
    parser.add_argument("--extractive-limit", type=int, default=0, help="first N extractive items (0: all)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--accumulate", type=int, default=4, help="examples per optimizer step")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument(
        "--answers",
        choices=["gold", "teacher"],
        default="gold",
        help="training answers: the gold sentence, or the base weights' own greedy plain-RAG answer",
    )
    parser.add_argument(
        "--before-from", type=Path, default=None, help="take the 'before' scores from this earlier report"
    )
    parser.add_argument(
        "--train-data",
        type=Path,
        default=None,
        help="train on this JSONL file (query, pos, neg) instead of WikiQA's other questions (use --answers teacher)",
    )
    parser.add_argument("--passage-words", type=int, default=0, help="with --train-data: cut passages (0: whole)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--adapter-out", type=Path, default=REPO / "runs" / "block_attention_probe")
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "block_attention_probe.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    from peft import LoraConfig, get_peft_model

    import genembed
    from genembed.generation.adapters import adapter_mode
    from genembed.generation.rag_prompt import RagPrompt

    started = time.perf_counter()
    model = genembed.load(adapter=False, dtype="float32", device="cpu")
    prompt = RagPrompt()
    train, wikiqa, extractive = load_examples(args)
    extractive = extractive[: args.extractive_limit or None]
    agreement = check_against_assemble(model, prompt, extractive[0])
    print(f"probe's cached prompt vs assemble: max |diff| {agreement:.2e}", flush=True)
    if agreement > 1e-4:
        raise SystemExit("the probe's cached layout does not reproduce assemble's; nothing trained")

    if args.answers == "teacher":
        teacher_answers(
            model, prompt, train, args.adapter_out / "teacher_answers.jsonl", max_new_tokens=args.max_new_tokens
        )

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    config = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, target_modules=targets)
    lm = get_peft_model(model.backbone.model, config)
    model.backbone.model = lm
    tok = model.backbone.tokenizer

    report: dict = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "git_commit": git_commit(),
        "assemble_max_diff": agreement,
    }
    report["before"] = (
        reuse_before(args)
        if args.before_from
        else score(model, prompt, wikiqa, extractive, lora=False, max_new_tokens=args.max_new_tokens)
    )
    params = [p for p in lm.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    schedule = [(item, random.Random(args.seed + 7 + i).choice(MODES)) for i, item in enumerate(train)] * args.epochs
    total_steps = max(1, len(schedule) // args.accumulate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / (total_steps + 1))
    losses: list[dict] = []
    lm.train()
    bar = tqdm(schedule, desc="train (KL to the full pass)")
    for n, (item, mode) in enumerate(bar):
        head, segments, tail = layout(tok, prompt, item, mode)
        answer = answer_ids(tok, item["answer"])
        with torch.no_grad(), adapter_mode(lm, False):
            teacher = answer_logits(lm, head, segments, tail, answer, isolate=False)
        student = answer_logits(lm, head, segments, tail, answer, isolate=True)
        loss = kl_loss(teacher, student)
        (loss / args.accumulate).backward()
        losses.append({"example": n, "mode": mode, "kl": loss.item()})
        if (n + 1) % args.accumulate == 0:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        bar.set_postfix(kl=f"{statistics.fmean(x['kl'] for x in losses[-40:]):.4f}")
    lm.eval()
    lm.save_pretrained(args.adapter_out)
    report["train"] = {
        "examples": len(schedule),
        "optimizer_steps": total_steps,
        "kl_first_40": statistics.fmean(x["kl"] for x in losses[:40]),
        "kl_last_40": statistics.fmean(x["kl"] for x in losses[-40:]),
        "per_example": losses,
    }
    report["after"] = score(model, prompt, wikiqa, extractive, lora=True, max_new_tokens=args.max_new_tokens)
    report["seconds"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    tmp.replace(args.out)
    print(table(report))


def reuse_before(args: argparse.Namespace) -> dict:
    """The 'before' section of ``args.before_from``, after checking it scored the same held-out items."""
    earlier = json.loads(args.before_from.read_text("utf-8"))
    same = ("eval_questions", "extractive_limit", "max_new_tokens", "seed")
    wrong = [k for k in same if earlier["config"].get(k) != getattr(args, k)]
    if wrong:
        raise SystemExit(f"{args.before_from}: scored with other {', '.join(wrong)}; its 'before' does not apply")
    return earlier["before"]


def table(report: dict) -> str:
    """Markdown: per mode, the gold-NLL gap to the base full pass and extractive F1, before and after."""
    lines = [
        "| mode | WikiQA gold-NLL gap before | after | extractive gap before | after | extractive F1 before | after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in VARIANTS:
        cells = [report[s][t][mode]["gap"] for t in ("wikiqa", "extractive") for s in ("before", "after")]
        f1 = [report[s]["extractive_answers"][mode]["f1"] for s in ("before", "after")]
        lines.append(
            f"| {mode} | " + " | ".join(f"{c:+.3f}" for c in cells) + " | " + " | ".join(f"{x:.1f}" for x in f1) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
