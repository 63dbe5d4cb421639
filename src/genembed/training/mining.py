"""Hard negatives mined by the model itself, or by the distillation teacher: rank a pool of texts for every
query and keep the hardest.

For each row of contrastive training files (:mod:`.data.contrastive`) the query is embedded on the
query side (its row's instruction, as training does) and compared with a candidate pool: every distinct
positive and negative text of the input files, embedded on the document side (the ``doc_instruction``,
or the row's own instruction for symmetric rows, as :func:`.data.batches.build_contrastive_batch` lays a
batch out). The top ``depth`` candidates by inner product of normalised vectors (faiss ``IndexFlatIP``)
are filtered and the first ``num_negatives`` left become the row's ``neg`` (after its original
negatives, when those are kept). Filtered out:

- the row's positives and query, and texts equal to them after whitespace and case normalisation;
- texts that are a positive of a row with the same ``label`` (same class as the query);
- likely false negatives: a score above ``margin`` times the positive's score (the lowest, with
  several positives). This is NV-Retriever's positive-aware "TopK-PercPos" filter (Moreira et al.,
  2024, "NV-Retriever: Improving text embedding models with effective hard-negative mining",
  arXiv:2407.15831), whose best setting is 95 %;
- optionally the first ``skip_top`` ranks.

Every other field of a row is written unchanged, so the output is a training file like the input.
Mining the model of the previous stage between stages is how negatives are "refreshed between stages"
(docs/training.md, "Mining hard negatives").

Mined by a teacher (``teacher=``, ``genembed mine-negatives --teacher all-mpnet-base-v2``), queries and pool
are the teacher's cached targets (:mod:`.teacher_targets`): the vectors distillation looks up, so the mined
negatives cost no teacher forward when they are distilled, and a teacher that already retrieves well (the
student's own ranking is what it is being trained to fix) picks them. The teacher reads no instruction, so
files of several instructions share one ranking.

A model's embeddings go through :func:`genembed.encoders.corpus.encode_corpus` into shards in ``OUT.mining/``
beside the output, one folder per (side, instruction), named by a digest of the model, the settings
and the texts; a rerun after an interruption resumes from the shards already written. The folder is
removed once the output is written, unless ``keep_cache``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._files import atomic_write
from ..encoders.corpus import encode_corpus, load_corpus_embeddings
from ..encoders.output import OutputPipeline
from ..encoders.settings import EMBEDDING_FIELDS, EmbedSettings, RunOptions
from .data.contrastive import ContrastiveRow, contrastive_row
from .data.jsonl import iter_jsonl
from .teacher_targets import TargetStore

__all__ = ["MiningResult", "mine_negatives", "normalize_text", "select_negatives"]

REASONS = ("positive", "duplicate", "label", "margin", "skip_top")


@dataclass
class MiningResult:
    """What a run wrote: rows, pool size, negatives mined and how many candidates each filter removed."""

    out: Path
    rows: int
    pool: int
    mined: int  # mined negatives written (originals not counted)
    short_rows: int  # rows that got fewer than num_negatives mined negatives
    removed: dict[str, int] = field(default_factory=dict)  # filter reason -> candidates removed


@dataclass(frozen=True)
class _Row:
    raw: dict[str, Any]
    row: ContrastiveRow
    doc_instruction: str


def normalize_text(text: str) -> str:
    """Whitespace runs collapsed and case folded: what counts as an exact duplicate."""
    return " ".join(text.split()).casefold()


def select_negatives(
    ranked: Sequence[int],
    scores: Sequence[float],
    *,
    norms: Sequence[str],
    own: set[str],
    originals: set[str],
    same_label: set[int],
    positive_score: float,
    margin: float,
    count: int,
    skip_top: int = 0,
    removed: Counter | None = None,
) -> list[int]:
    """The first ``count`` candidates of ``ranked`` (pool indices, best first) that pass the filters.

    Args:
        ranked, scores: candidates and their scores, best first.
        norms: normalised text of every pool index (:func:`normalize_text`).
        own: normalised query and positives of the row, and every text paired with the query by another
            row of the files (never a negative).
        originals: normalised negatives already kept for the row (not repeated).
        same_label: pool indices that are a positive of a row of the query's class.
        positive_score: the row's positive score; a candidate above ``margin * positive_score`` is a
            likely false negative.
        margin: the false-negative margin (e.g. 0.95); 0 turns the filter off.
        count: negatives wanted.
        skip_top: ranks skipped before any filter.
        removed: counts each removed candidate under its reason (see ``REASONS``), if given.

    Returns:
        The chosen pool indices, best first.
    """
    removed = removed if removed is not None else Counter()
    chosen: list[int] = []
    for rank, (index, score) in enumerate(zip(ranked, scores, strict=True)):
        if len(chosen) == count:
            break
        norm = norms[index]
        if rank < skip_top:
            reason = "skip_top"
        elif norm in own:
            reason = "positive"
        elif norm in originals or any(norms[c] == norm for c in chosen):
            reason = "duplicate"
        elif index in same_label:
            reason = "label"
        elif margin > 0 and score > margin * positive_score:
            reason = "margin"
        else:
            chosen.append(index)
            continue
        removed[reason] += 1
    return chosen


def _read(paths: Sequence[Path], symmetric: Sequence[bool], doc_instruction: str) -> list[_Row]:
    """Every row of every file, validated by the training reader and kept raw for writing back."""
    rows = []
    for path, sym in zip(paths, symmetric, strict=True):
        for line, raw in iter_jsonl(path):
            row = contrastive_row(raw, path, line)  # raises DataError naming file, line and field
            rows.append(_Row(raw, row, row.instruction if sym else doc_instruction))
    return rows


def _embed(
    model: Any,
    model_key: str,
    texts: list[str],
    instruction: str,
    options: EmbedSettings,
    cache: Path,
    side: str,
    **kw: Any,
) -> np.ndarray:
    """``(n, dim)`` normalised embeddings of ``texts`` through resumable corpus shards under ``cache``;
    ``model_key`` identifies the model's weights, so a folder is never reused across models."""
    lines = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    settings = {k: getattr(options, k) for k in EMBEDDING_FIELDS}
    texts_key = hashlib.blake2b(lines.encode()).hexdigest()
    key = hashlib.blake2b(
        json.dumps([model_key, settings, instruction, texts_key], sort_keys=True).encode(), digest_size=8
    ).hexdigest()
    source, folder = cache / f"{side}-{key}.jsonl", cache / f"{side}-{key}"
    if not source.is_file():
        atomic_write(source, lambda tmp: tmp.write_text(lines, "utf-8"))
    encode_corpus(
        model.backbone, source, folder, options, instruction=instruction, title_field=None, model_name=key, **kw
    )
    _, embeddings = load_corpus_embeddings(folder)
    return np.ascontiguousarray(embeddings, dtype=np.float32)


def _search(queries: np.ndarray, pool: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    import faiss

    index = faiss.IndexFlatIP(pool.shape[1])
    index.add(pool)
    scores, ranked = index.search(queries, min(depth, len(pool)))
    return scores, ranked


def _rows(vectors: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))


def _model_vectors(
    model: Any,
    query_texts: dict[str, list[str]],
    pool: list[str],
    doc_instructions: list[str],
    cache: Path,
    *,
    options: EmbedSettings,
    run: RunOptions | None,
    query_max_length: int,
    doc_max_length: int,
    center: bool | None,
    shard_size: int,
    show_progress_bar: bool,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The model's query vectors per query instruction and pool vectors per document instruction."""
    from ..eval.encoders import GenembedEncoder

    model_key = GenembedEncoder(model).cache_key  # weights, adapter tensors, dtype and encoding code
    kw: dict[str, Any] = {"shard_size": shard_size, "show_progress_bar": show_progress_bar}
    # centred as the model centres (not truncated: the candidates are ranked on whole vectors)
    kw["run"] = RunOptions.of(options) if run is None else run
    kw["output"] = OutputPipeline(center=model.center if center is None else center)
    q_opts = options.replace(max_length=query_max_length)
    d_opts = options.replace(max_length=doc_max_length)
    queries = {
        inst: _embed(model, model_key, qs, inst, q_opts, cache, "queries", **kw) for inst, qs in query_texts.items()
    }
    docs = {inst: _embed(model, model_key, pool, inst, d_opts, cache, "pool", **kw) for inst in doc_instructions}
    return queries, docs


def mine_negatives(
    model: Any | None,
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    symmetric: bool | Sequence[bool] = False,
    doc_instruction: str = "",
    options: EmbedSettings | None = None,
    run: RunOptions | None = None,
    query_max_length: int = 64,
    doc_max_length: int = 128,
    depth: int = 30,
    num_negatives: int = 3,
    margin: float = 0.95,
    skip_top: int = 0,
    keep_original: bool = True,
    shard_size: int = 1024,
    keep_cache: bool = False,
    show_progress_bar: bool = True,
    center: bool | None = None,
    teacher: TargetStore | None = None,
) -> MiningResult:
    """Write ``out``: the rows of ``inputs`` with ``neg`` set to negatives mined by ``model``.

    Args:
        model: a loaded :class:`~genembed.GenerativeEmbedder` (the previous stage's model); None with ``teacher``.
        inputs: contrastive JSONL files; their positives and negatives form the candidate pool.
        out: the output JSONL file (written atomically; must not be one of the inputs).
        symmetric: documents carry the row's instruction (one flag for all files, or one per file), as
            a training file entry with ``symmetric: true``.
        doc_instruction: the document instruction of the other rows (``data.doc_instruction``).
        options: encoding settings (method, steps, ...); ``max_length`` is replaced by
            ``query_max_length`` and ``doc_max_length``. None: the model's defaults.
        run: the speed switches (batch size, ...; None: those given to ``options``, else the defaults).
        query_max_length, doc_max_length: tokens per query / document prompt, as
            ``embedding.query_max_length`` and ``embedding.doc_max_length`` in training.
        depth: candidates retrieved per query before filtering.
        num_negatives: mined negatives kept per row (fewer when the filters leave fewer).
        margin: drop candidates scoring above ``margin`` times the positive's score (0: keep them).
        skip_top: ranks skipped before filtering.
        keep_original: keep the row's own negatives first (mined ones follow and never repeat them).
        shard_size: texts per embedding shard (the unit of resuming).
        keep_cache: keep the embedding shards in ``OUT.mining/`` after writing ``out``.
        show_progress_bar: progress bars for encoding and mining.
        center: subtract each instruction's centre (:mod:`genembed.encoders.centering`); None: ``model.center``.
        teacher: rank with a distillation teacher's cached embeddings instead of ``model`` (a
            :class:`~.teacher_targets.TargetStore`; texts it lacks are computed when it has an encoder). The
            teacher reads texts as it was trained, without instructions or length options; the store's vectors
            are the ones distillation looks up, so mining costs no encoding where they are stored.

    Returns:
        A :class:`MiningResult`.

    Raises:
        DataError: a bad input row (file, line and field named).
        ValueError: a bad setting.
    """
    paths, out = [Path(p) for p in inputs], Path(out)
    if not paths:
        raise ValueError("no input files given")
    if any(p.resolve() == out.resolve() for p in paths):
        raise ValueError(f"the output {out} is one of the inputs; write it elsewhere")
    if depth < 1 or num_negatives < 0 or skip_top < 0 or margin < 0:
        raise ValueError(
            f"need depth >= 1, num_negatives >= 0, skip_top >= 0, margin >= 0 (got {depth}, "
            f"{num_negatives}, {skip_top}, {margin})"
        )
    flags = [symmetric] * len(paths) if isinstance(symmetric, bool) else list(symmetric)
    if len(flags) != len(paths):
        raise ValueError(f"{len(flags)} symmetric flags for {len(paths)} input files")
    if (model is None) == (teacher is None):
        raise ValueError("mine with a model or with a teacher's targets: give exactly one")
    rows = _read(paths, flags, doc_instruction)

    pool = list(dict.fromkeys(t for r in rows for t in (*r.row.pos, *r.row.neg)))
    where = {text: i for i, text in enumerate(pool)}
    norms = [normalize_text(t) for t in pool]
    # every text a file pairs with another as query and positive (either way round): rows that share a
    # query (twitter_para, parasci) hold each other's paraphrases, which must not come back as negatives
    partners: dict[str, set[str]] = {}
    for r in rows:
        query = normalize_text(r.row.query)
        for pos in map(normalize_text, r.row.pos):
            partners.setdefault(query, {query}).add(pos)
            partners.setdefault(pos, {pos}).add(query)
    by_label: dict[str, set[int]] = {}
    for r in rows:
        if r.row.label is not None:
            by_label.setdefault(r.row.label, set()).update(where[t] for t in r.row.pos)

    query_texts = {
        inst: list(dict.fromkeys(r.row.query for r in rows if r.row.instruction == inst))
        for inst in dict.fromkeys(r.row.instruction for r in rows)
    }
    q_index = {(inst, t): i for inst, texts in query_texts.items() for i, t in enumerate(texts)}
    doc_instructions = list(dict.fromkeys(r.doc_instruction for r in rows))
    cache = out.with_name(out.name + ".mining")
    if teacher is not None:  # one vector per text whatever its instruction: the teacher reads none
        queries = {inst: _rows(teacher.vectors(texts, queries=True)) for inst, texts in query_texts.items()}
        pool_vectors = _rows(teacher.vectors(pool))
        docs = dict.fromkeys(doc_instructions, pool_vectors)
    else:
        queries, docs = _model_vectors(
            model,
            query_texts,
            pool,
            doc_instructions,
            cache,
            options=options or model.embed_settings(),
            run=run,
            query_max_length=query_max_length,
            doc_max_length=doc_max_length,
            center=center,
            shard_size=shard_size,
            show_progress_bar=show_progress_bar,
        )

    from tqdm.auto import tqdm

    removed: Counter = Counter()
    new_negs: list[list[str]] = [[] for _ in rows]
    mined = short = 0
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.row.instruction, r.doc_instruction), []).append(i)
    with tqdm(total=len(rows), desc="mine negatives", unit="row", disable=not show_progress_bar) as bar:
        for (q_inst, d_inst), members in groups.items():
            q = queries[q_inst][[q_index[(q_inst, rows[i].row.query)] for i in members]]
            scores, ranked = _search(q, docs[d_inst], depth)
            for j, i in enumerate(members):
                row = rows[i].row
                originals = list(row.neg) if keep_original else []
                positive_score = min(float(q[j] @ docs[d_inst][where[t]]) for t in row.pos)
                keep = ranked[j] >= 0  # faiss pads with -1 when the pool is smaller than asked
                chosen = select_negatives(
                    ranked[j][keep].tolist(),
                    scores[j][keep].tolist(),
                    norms=norms,
                    own=partners[normalize_text(row.query)],
                    originals={normalize_text(t) for t in originals},
                    same_label=by_label.get(row.label, set()) if row.label is not None else set(),
                    positive_score=positive_score,
                    margin=margin,
                    count=num_negatives,
                    skip_top=skip_top,
                    removed=removed,
                )
                new_negs[i] = originals + [pool[c] for c in chosen]
                mined += len(chosen)
                short += len(chosen) < num_negatives
            bar.update(len(members))

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as handle:
            for r, negs in zip(rows, new_negs, strict=True):
                handle.write(json.dumps({**r.raw, "neg": negs}, ensure_ascii=False) + "\n")

    atomic_write(out, write)
    if not keep_cache:
        shutil.rmtree(cache, ignore_errors=True)
    return MiningResult(out, len(rows), len(pool), mined, short, {k: removed[k] for k in REASONS})
