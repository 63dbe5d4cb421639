"""Hard-negative mining (genembed.training.mining) on the tiny random model."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from genembed.encoders.embedder import encode_texts
from genembed.encoders.settings import EmbedSettings, RunOptions
from genembed.training.data import DataError, build_contrastive_batch, read_contrastive
from genembed.training.mining import mine_negatives, normalize_text, select_negatives

INST = "Classify the emotion expressed in the given text."
CLASSES = {
    "joy": ["I am so happy today.", "What a wonderful day.", "This makes me glad.", "I love this song."],
    "anger": ["This makes me furious.", "I am so angry now.", "Stop yelling at me.", "That was outrageous."],
    "sadness": ["I miss my old friends.", "The news made me cry.", "I feel so lonely.", "It was a sad ending."],
}
OPTIONS = EmbedSettings(method="gircse", steps=2)


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _labelled(tmp_path: Path) -> Path:
    """Three classes, four texts each: every text is a query once; pos = the next text of its class, neg =
    a text of the next class. A case/space variant of a positive sits in the pool as a negative."""
    rows, names = [], list(CLASSES)
    for c, name in enumerate(names):
        texts = CLASSES[name]
        other = CLASSES[names[(c + 1) % len(names)]]
        for i, text in enumerate(texts):
            rows.append(
                {"query": text, "pos": [texts[(i + 1) % 4]], "neg": [other[i]], "instruction": INST, "label": name}
            )
    rows[0]["neg"].append("  what a  WONDERFUL day. ")  # rows[0]'s positive, reformatted
    return _write(tmp_path / "emotion.jsonl", rows)


def _mine(model, inputs, out, **kw):
    kw.setdefault("depth", 100)
    kw.setdefault("margin", 0)  # off unless a test turns it on
    return mine_negatives(
        model, inputs, out, options=OPTIONS, run=RunOptions(batch_size=4), show_progress_bar=False, **kw
    )


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _embed(model, texts: list[str], max_length: int) -> np.ndarray:
    options = OPTIONS.replace(max_length=max_length)
    vectors, _ = encode_texts(model.backbone, texts, options, instruction=INST)
    return torch.nn.functional.normalize(vectors, dim=-1).numpy()


def test_select_negatives_applies_each_filter_in_rank_order():
    norms = ["pos", "dup", "same", "close", "a", "b", "c", "a"]
    removed: Counter = Counter()
    chosen = select_negatives(
        [0, 1, 2, 3, 4, 5, 7, 6],
        [0.99, 0.98, 0.97, 0.96, 0.8, 0.7, 0.65, 0.6],
        norms=norms,
        own={"pos"},
        originals={"dup"},
        same_label={2},
        positive_score=1.0,
        margin=0.95,
        count=3,
        removed=removed,
    )
    # 7 repeats 4's text, so 6 comes third
    assert chosen == [4, 5, 6]
    assert removed == Counter(positive=1, duplicate=2, label=1, margin=1)
    skipped = select_negatives(
        [4, 5, 6], [0.8, 0.7, 0.6], norms=norms, own=set(), originals=set(), same_label=set(),
        positive_score=1.0, margin=0.95, count=3, skip_top=2,
    )  # fmt: skip
    assert skipped == [6]
    no_margin = select_negatives(
        [3], [0.96], norms=norms, own=set(), originals=set(), same_label=set(), positive_score=1.0, margin=0, count=1
    )
    assert no_margin == [3]


def test_positives_and_same_label_texts_never_come_back(tmp_path, tiny_model):
    src = _labelled(tmp_path)
    result = _mine(tiny_model, [src], tmp_path / "out.jsonl", num_negatives=3)
    rows, originals = _read(result.out), _read(src)
    class_of = {t: name for name, texts in CLASSES.items() for t in texts}
    assert result.rows == len(rows) == 12
    assert result.pool == 13  # 12 texts + the reformatted duplicate
    for row, original in zip(rows, originals, strict=True):
        mined = row["neg"][len(original["neg"]) :]
        assert row["neg"][: len(original["neg"])] == original["neg"]  # originals first
        assert len(mined) == 3
        own = {normalize_text(t) for t in (row["query"], *row["pos"])}
        assert not own & {normalize_text(t) for t in mined}
        assert all(class_of.get(t) != row["label"] for t in mined)  # no text of the query's class
        assert {k: v for k, v in row.items() if k != "neg"} == {k: v for k, v in original.items() if k != "neg"}
        assert list(row) == list(original)
    assert result.removed["label"] > 0 and result.removed["positive"] > 0
    assert result.mined == 36 and result.short_rows == 0
    assert not (tmp_path / "out.jsonl.mining").exists()  # the cache goes once the output is written


def test_the_mined_file_feeds_training_batches(tmp_path, tiny_model):
    result = _mine(tiny_model, [_labelled(tmp_path)], tmp_path / "out.jsonl", num_negatives=3, keep_original=False)
    rows = read_contrastive(result.out)
    assert all(len(row.neg) == 3 for row in rows)
    batch = build_contrastive_batch(rows[:4], hard_negatives=3, rng=np.random.default_rng(0))
    assert [end - start for start, end in batch.groups] == [4, 4, 4, 4]  # 1 positive + 3 mined negatives


def test_margin_removes_a_near_copy_of_the_positive(tmp_path, tiny_model):
    pos, near = "The cat sat on the mat.", "The cat sat on the mat today."
    others = ["Stocks fell sharply on Monday.", "Rain is expected tomorrow.", "She plays the violin.", "Bake it."]
    rows = [{"query": "Where did the cat sit?", "pos": [pos], "instruction": INST}]
    rows += [{"query": f"question {i}", "pos": [t], "instruction": INST} for i, t in enumerate([near, *others])]
    src = _write(tmp_path / "cats.jsonl", rows)

    without = _read(_mine(tiny_model, [src], tmp_path / "a.jsonl", num_negatives=10).out)[0]["neg"]
    assert sorted(without) == sorted([near, *others])  # no margin: every candidate but the positive
    with_margin = _mine(tiny_model, [src], tmp_path / "b.jsonl", num_negatives=10, margin=0.95)
    kept = _read(with_margin.out)[0]["neg"]

    q = _embed(tiny_model, [rows[0]["query"]], 64)[0]
    docs = _embed(tiny_model, [pos, near, *others], 128)
    scores = dict(zip([pos, near, *others], (docs @ q).tolist(), strict=True))
    assert scores[near] > 0.95 * scores[pos]  # the near-copy is a likely false negative here
    assert near not in kept
    assert sorted(kept) == sorted(t for t in others if scores[t] <= 0.95 * scores[pos])
    assert kept == sorted(kept, key=lambda t: -scores[t])  # hardest first


def test_resume_after_an_interruption_gives_the_same_file(tmp_path, tiny_model, monkeypatch):
    import genembed.encoders.corpus as corpus

    src = _labelled(tmp_path)
    fresh = _mine(tiny_model, [src], tmp_path / "fresh" / "out.jsonl", shard_size=3).out.read_bytes()

    calls = []
    real = corpus.encode_texts

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(corpus, "encode_texts", failing)
    out = tmp_path / "run" / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _mine(tiny_model, [src], out, shard_size=3)
    assert not out.exists() and (tmp_path / "run" / "out.jsonl.mining").is_dir()

    calls.clear()
    monkeypatch.setattr(corpus, "encode_texts", lambda *a, **k: calls.append(1) or real(*a, **k))
    _mine(tiny_model, [src], out, shard_size=3)
    assert out.read_bytes() == fresh
    # 12 queries + 13 pool texts in shards of 3: 4 + 5 shards, of which the first run finished 3
    assert len(calls) == 9 - 3


def test_symmetric_rows_put_the_instruction_on_documents(tmp_path, tiny_model):
    src = _labelled(tmp_path)
    plain = _read(_mine(tiny_model, [src], tmp_path / "a.jsonl", keep_original=False).out)
    sym = _read(_mine(tiny_model, [src], tmp_path / "b.jsonl", keep_original=False, symmetric=True).out)
    q = _embed(tiny_model, [r["query"] for r in plain], 64)
    pool = list(dict.fromkeys(t for r in _read(src) for t in (*r["pos"], *r["neg"])))
    docs = _embed(tiny_model, pool, 128)  # with the instruction, as symmetric training embeds documents
    first = [pool[int(i)] for i in np.argsort(-(docs @ q[0]))]
    expected = [t for t in first if t not in CLASSES["joy"] and normalize_text(t) != "what a wonderful day."]
    assert sym[0]["neg"] == expected[:3]
    assert sym != plain  # the instruction on documents changes the ranking of this random model


def test_a_bad_row_names_file_line_and_field(tmp_path, tiny_model):
    good = {"query": "q", "pos": ["p"], "instruction": INST}
    src = _write(tmp_path / "bad.jsonl", [good, good, {"query": "q", "pos": "p"}])
    with pytest.raises(DataError, match=rf"{src}:3: field 'pos' must be a list of strings"):
        _mine(tiny_model, [src], tmp_path / "out.jsonl")
    with pytest.raises(ValueError, match="is one of the inputs"):
        _mine(tiny_model, [src], src)


def test_cli_mines_and_reports_bad_input(tmp_path, tiny_folder):
    from typer.testing import CliRunner

    from genembed.cli.app import app

    src, out = _labelled(tmp_path), tmp_path / "out.jsonl"
    common = ["--model", str(tiny_folder), "--adapter", "none", "--steps", "2", "--quiet"]
    result = CliRunner().invoke(
        app, ["mine-negatives", str(src), "--out", str(out), "--num-negatives", "2", "--margin", "0", *common]
    )
    assert result.exit_code == 0, result.output
    assert "12 rows, pool 13 texts" in result.output
    assert [len(r["neg"]) for r in _read(out)] == [4] + [3] * 11  # originals + 2 mined
    bad = _write(tmp_path / "bad.jsonl", ['{"query": "q", "pos": ["p"], "negs": []}'])
    result = CliRunner().invoke(app, ["mine-negatives", str(bad), "--out", str(tmp_path / "x.jsonl"), *common])
    assert result.exit_code == 2
    assert f"{bad}:1: unknown field 'negs'" in result.output


def test_a_changed_model_does_not_reuse_the_cached_embeddings(tmp_path, tiny_model):
    src, out = _labelled(tmp_path), tmp_path / "out.jsonl"
    cache = tmp_path / "out.jsonl.mining"
    _mine(tiny_model, [src], out, keep_cache=True)
    before = {p.name for p in cache.iterdir() if p.is_dir()}
    assert len(before) == 2  # one folder for the queries, one for the pool
    with torch.no_grad():  # the next stage's weights
        next(tiny_model.backbone.model.parameters()).add_(0.5)
    _mine(tiny_model, [src], out, keep_cache=True)
    after = {p.name for p in cache.iterdir() if p.is_dir()}
    assert len(after) == 4 and before < after
    assert out.read_bytes() == _mine(tiny_model, [src], tmp_path / "fresh.jsonl").out.read_bytes()


def test_positives_of_other_rows_with_the_same_query_are_never_negatives(tmp_path, tiny_model):
    """twitter_para and parasci hold many rows per query: each row's positive is a paraphrase of the query
    for the others too, so it must not be mined as their negative (pairs count either way round; a paraphrase
    of a paraphrase is not known to the filter)."""
    query, paraphrases = "The cat sat on the mat.", ["A cat was sitting on the mat.", "On the mat sat a cat."]
    others = ["Stocks fell sharply today.", "Rain is expected tomorrow.", "He plays the violin."]
    rows = [{"query": query, "pos": [p], "neg": [others[i]]} for i, p in enumerate(paraphrases)]
    rows.append({"query": paraphrases[1], "pos": ["The mat had a cat on it."], "neg": [others[2]]})
    path = _write(tmp_path / "para.jsonl", rows)
    result = _mine(tiny_model, [path], tmp_path / "out.jsonl", num_negatives=10, keep_original=False)
    mined = [row["neg"] for row in _read(result.out)]
    assert not set(paraphrases) & set(mined[0]) and not set(paraphrases) & set(mined[1])
    assert paraphrases[1] not in mined[2] and "The mat had a cat on it." not in mined[2]
    assert set(mined[0]) == set(others) | {"The mat had a cat on it."}  # the rest of the pool, all of it
    assert set(mined[2]) == set(others) | {paraphrases[0]}


# ---- mined by the teacher: its cached targets rank the pool ----------------------------------------------

TOPICS = {  # text -> a 3-d direction: the fake teacher's view of each text
    "how do plants make food": (1.0, 0.0, 0.0),
    "Plants make food by photosynthesis.": (0.9, 0.1, 0.0),
    "Leaves are green because of chlorophyll.": (0.85, 0.0, 0.2),  # close to the query: the hard negative
    "The stock market fell today.": (0.0, 1.0, 0.0),
    "what moves share prices": (0.0, 0.7, 0.7),
    "Prices move with supply and demand.": (0.0, 0.8, 0.3),
    "Rain fell all night.": (0.1, 0.2, 1.0),
}


def _topic_encoder(seen: list[str]):
    def encode(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return np.array([TOPICS[t] for t in texts])

    return encode


def _topic_file(tmp_path: Path) -> Path:
    rows = [
        {"query": "how do plants make food", "pos": ["Plants make food by photosynthesis."], "instruction": "A"},
        {"query": "what moves share prices", "pos": ["Prices move with supply and demand."], "instruction": "B"},
    ]
    rows[0]["neg"], rows[1]["neg"] = ["Rain fell all night.", "The stock market fell today."], []
    rows[1]["neg"].append("Leaves are green because of chlorophyll.")
    return _write(tmp_path / "topics.jsonl", rows)


def test_the_teacher_ranks_the_pool_without_a_model(tmp_path):
    from genembed.training.teacher_targets import build_targets

    src, seen = _topic_file(tmp_path), []
    store = build_targets(list(TOPICS), tmp_path / "targets", "fake", encode=_topic_encoder(seen), dimension=3)
    result = mine_negatives(
        None, [src], tmp_path / "out.jsonl", teacher=store, num_negatives=1, margin=0, keep_original=False,
        show_progress_bar=False,
    )  # fmt: skip
    mined = [row["neg"] for row in _read(result.out)]
    # each query's nearest text that is not its positive, whatever the rows' instructions
    assert mined == [["Leaves are green because of chlorophyll."], ["Rain fell all night."]]
    assert result.pool == 5 and not (tmp_path / "out.jsonl.mining").exists()
    # the margin filter reads the teacher's scores: the leaf text scores 0.98 x the positive's, above 0.95
    result = mine_negatives(
        None, [src], tmp_path / "out2.jsonl", teacher=store, num_negatives=1, margin=0.95, keep_original=False,
        show_progress_bar=False,
    )  # fmt: skip
    assert _read(result.out)[0]["neg"] == ["Rain fell all night."] and result.removed["margin"] == 1


def test_a_teacher_store_fills_the_texts_it_lacks(tmp_path):
    from genembed.training.teacher_targets import build_targets

    src, seen = _topic_file(tmp_path), []
    encode = _topic_encoder(seen)
    store = build_targets(list(TOPICS)[:2], tmp_path / "targets", "fake", encode=encode, dimension=3)
    seen.clear()
    mine_negatives(None, [src], tmp_path / "out.jsonl", teacher=store.fill_with(encode), show_progress_bar=False)
    assert sorted(seen) == sorted(list(TOPICS)[2:])  # only the missing ones were embedded


def test_model_and_teacher_are_exclusive(tmp_path, tiny_model):
    from genembed.training.teacher_targets import build_targets

    src = _topic_file(tmp_path)
    store = build_targets(list(TOPICS), tmp_path / "targets", "fake", encode=_topic_encoder([]), dimension=3)
    for model, teacher in ((None, None), (tiny_model, store)):
        with pytest.raises(ValueError, match="give exactly one"):
            mine_negatives(model, [src], tmp_path / "out.jsonl", teacher=teacher)


def test_cli_mines_with_a_teacher_folder_and_reuses_its_store(tmp_path, tiny_teacher):
    from typer.testing import CliRunner

    from genembed.cli.app import app

    src, targets = _labelled(tmp_path), tmp_path / "targets"
    args = ["mine-negatives", str(src), "--teacher", str(tiny_teacher), "--targets", str(targets), "--margin", "0"]
    args.append("--quiet")
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a.jsonl"), "--teacher-max-length", "32"])
    assert result.exit_code == 0, result.output
    assert "12 rows, pool 13 texts" in result.output
    chunks = sorted(targets.rglob("chunk-*.safetensors"))
    assert len(chunks) == 1
    assert [len(r["neg"]) for r in _read(tmp_path / "a.jsonl")] == [5] + [4] * 11  # originals + 3 mined
    # a second run reads the store's max_length and embeds nothing
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b.jsonl")])
    assert result.exit_code == 0, result.output
    assert sorted(targets.rglob("chunk-*.safetensors")) == chunks
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "c.jsonl"), "--adapter", "none"])
    assert result.exit_code == 2 and "drop --model and --adapter" in result.output
    # options that only set how the model embeds are refused, not silently ignored
    result = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "d.jsonl"), "--steps", "3", "--doc-max-length", "9"]
    )
    assert result.exit_code == 2
    assert "--steps, --doc-max-length set how the model embeds" in " ".join(result.output.split())
    assert not (tmp_path / "d.jsonl").exists()
