from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from genembed.training.data import (
    ContrastiveRow,
    ContrastiveStream,
    DataError,
    FileSpec,
    MixtureSampler,
    build_contrastive_batch,
)


def test_one_file_per_batch_and_weights():
    sampler = MixtureSampler([100, 100, 100], [1.0, 1.0, 2.0], batch_size=8, seed=0)
    files = Counter()
    for _ in range(400):
        batch = sampler.next_batch()
        assert len(batch) == 8 and len({f for f, _ in batch}) == 1
        assert len(set(batch)) == 8
        files[batch[0][0]] += 1
    assert files[2] / 400 == pytest.approx(0.5, abs=0.07)
    assert files[0] / 400 == pytest.approx(0.25, abs=0.07)


def test_every_row_once_per_pass():
    sampler = MixtureSampler([24], [1.0], batch_size=6, seed=1)
    rows = [r for _ in range(4) for _, r in sampler.next_batch()]
    assert sorted(rows) == list(range(24))


def test_small_file_is_topped_up_from_others():
    sampler = MixtureSampler([3, 50], [100.0, 1.0], batch_size=8, seed=2)
    batch = sampler.next_batch()
    counts = Counter(f for f, _ in batch)
    assert counts == {0: 3, 1: 5}


def test_duplicate_queries_never_share_a_batch():
    # 30 rows but only 10 distinct queries (one row per pair, as in twitter_para/parasci)
    keys = [[(f"q{i % 10}",)] for i in range(30)]
    sampler = MixtureSampler([30], [1.0], batch_size=5, seed=3, keys=[keys])
    seen = Counter()
    for _ in range(60):
        batch = sampler.next_batch()
        queries = [keys[r][0] for _, r in batch]
        assert len(batch) == 5 and len(set(queries)) == 5
        seen.update(r for _, r in batch)
    assert set(seen) == set(range(30))  # held-back rows are used later, not dropped
    assert max(seen.values()) - min(seen.values()) <= 4


def test_mixed_batches_when_not_one_file_per_batch():
    sampler = MixtureSampler([50, 50], [1.0, 1.0], batch_size=16, seed=4, one_file_per_batch=False)
    assert any(len({f for f, _ in sampler.next_batch()}) == 2 for _ in range(5))


def test_stream_is_deterministic_and_skip_resumes_exactly(assets):
    files = [FileSpec(str(assets / "similar.jsonl")), FileSpec(str(assets / "qa_pairs.jsonl"), weight=30.0)]

    def stream():
        return ContrastiveStream(files, batch_size=6, hard_negatives=1, seed=7)

    a, b = stream(), stream()
    first = [a.next() for _ in range(12)]
    b.skip(5)
    assert [b.next() for _ in range(7)] == first[5:]
    assert stream().next() == first[0]
    assert ContrastiveStream(files, batch_size=6, hard_negatives=1, seed=8).next() != first[0]


def test_batch_layout_labels_and_false_negative_mask():
    rows = [
        ContrastiveRow("q0", ("p0",), ("n0a", "n0b", "n0c"), "I"),
        ContrastiveRow("q1", ("p1", "alt1"), (), "I"),
        ContrastiveRow("q2", ("p2",), ("alt1",), "J"),  # its negative is a positive of q1
    ]
    batch = build_contrastive_batch(rows, hard_negatives=2, rng=np.random.default_rng(0), doc_instruction="D")
    assert batch.queries == ["q0", "q1", "q2"] and batch.query_instructions == ["I", "I", "J"]
    assert batch.groups == [(0, 3), (3, 4), (4, 6)] and batch.labels == [0, 3, 4]
    assert set(batch.documents[1:3]) <= {"n0a", "n0b", "n0c"} and len(set(batch.documents[1:3])) == 2
    assert batch.documents[3] in ("p1", "alt1")
    assert batch.document_instructions == ["D"] * 6
    if batch.documents[3] == "p1":
        assert batch.masked == [(1, 5)]  # "alt1" (q2's negative) is q1's positive, not its negative
        assert batch.mask_tensor()[1, 5] and batch.mask_tensor().sum() == 1
    sym = build_contrastive_batch(rows, hard_negatives=0, rng=np.random.default_rng(0), symmetric=[True] * 3)
    assert sym.documents == [sym.documents[0], sym.documents[1], "p2"] and sym.document_instructions == ["I", "I", "J"]


def test_class_labels_mask_same_class_positives_and_other_class_negatives():
    rows = [
        ContrastiveRow("great film", ("lovely phone",), ("awful film",), "S", label="pos"),
        ContrastiveRow("superb book", ("nice hotel",), ("dull book",), "S", label="pos"),
        ContrastiveRow("bad meal", ("rude airline",), ("tasty meal",), "S", label="neg"),
        ContrastiveRow("plain", ("also plain",), ("other",), "S"),  # unlabelled: masks and is masked as before
    ]
    batch = build_contrastive_batch(rows, hard_negatives=1, rng=np.random.default_rng(0))
    assert batch.documents == [
        "lovely phone",
        "awful film",
        "nice hotel",
        "dull book",
        "rude airline",
        "tasty meal",
        "also plain",
        "other",
    ]
    mask = batch.mask_tensor()
    assert sorted(batch.masked) == [(0, 2), (0, 5), (1, 0), (1, 5), (2, 1), (2, 3)]
    # query 0 (pos) still scores against: its own pair, q1's negative (neg, as q1 is pos), q2's positive (neg)
    assert [d for d in range(8) if not mask[0, d]] == [0, 1, 3, 4, 6, 7]
    assert not mask[3].any()


def test_shards_concatenate_back_to_the_batch():
    rows = [ContrastiveRow(f"q{i}", (f"p{i}",), tuple(f"n{i}{j}" for j in range(i % 3)), "") for i in range(4)]
    batch = build_contrastive_batch(rows, hard_negatives=2, rng=np.random.default_rng(1))
    shards = [batch.shard(r, 2) for r in range(2)]
    assert shards[0].documents + shards[1].documents == batch.documents
    offset = len(shards[0].documents)
    assert shards[0].labels + [x + offset for x in shards[1].labels] == batch.labels
    with pytest.raises(ValueError, match="split evenly"):
        batch.shard(0, 3)


def _axis_file(tmp_path, n=12):
    import json

    path = tmp_path / "axes.jsonl"
    rows = []
    for i in range(n):
        rows.append(
            {
                "query": f"review {i}",
                "pos": [f"s{i}"],
                "neg": [f"t{i}"],
                "instruction": "Sentiment?",
                "label": f"sentiment:{'pos' if i % 2 else 'neg'}",
            }
        )
        rows.append(
            {
                "query": f"review {i}",
                "pos": [f"d{i}"],
                "neg": [f"e{i}"],
                "instruction": "Domain?",
                "label": f"domain:{('movie', 'product', 'food')[i % 3]}",
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_batch_by_axis_gives_each_batch_one_axis_and_shares_the_weight(tmp_path):
    path = _axis_file(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(f'{{"query": "q{i}", "pos": ["p{i}"]}}\n' for i in range(30)))
    stream = ContrastiveStream(
        [FileSpec(str(path), weight=60.0, batch_by_axis=True), FileSpec(str(other))],
        batch_size=4,
        hard_negatives=1,
        seed=0,
    )
    assert [(f.name, w) for f, w in zip(stream.files, stream.weights, strict=True)] == [
        ("axes.jsonl[domain]", 30.0),
        ("axes.jsonl[sentiment]", 30.0),
        ("other.jsonl", 30.0),
    ]
    seen = Counter()
    for _ in range(30):
        batch = stream.next()
        (name,) = stream.last_rows  # one source per batch: never both axes of the review file
        seen[name] += 1
        if name.startswith("axes"):
            assert len(set(batch.query_instructions)) == 1
    assert set(seen) == {"axes.jsonl[domain]", "axes.jsonl[sentiment]", "other.jsonl"}
    assert [s["axis"] for s in stream.summary()[:2]] == ["domain", "sentiment"]


def test_batch_by_axis_names_a_row_without_an_axis_label(tmp_path):
    from genembed.training.data import DataError

    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"query": "a", "pos": ["b"], "label": "sentiment:pos"}\n{"query": "c", "pos": ["d"], "label": "pos"}\n'
    )
    with pytest.raises(DataError, match=r"bad\.jsonl: row 2: batch_by_axis needs a label 'axis:class', got 'pos'"):
        ContrastiveStream([FileSpec(str(path), batch_by_axis=True)], batch_size=2, hard_negatives=0, seed=0)


def test_skip_instructions_holds_rows_back_and_names_an_unknown_wording(tmp_path):
    from genembed.training.data import DataError

    path = _axis_file(tmp_path)
    stream = ContrastiveStream(
        [FileSpec(str(path), batch_by_axis=True, skip_instructions=("Domain?",))],
        batch_size=4,
        hard_negatives=1,
        seed=0,
    )
    assert [(f.name, len(r)) for f, r in zip(stream.files, stream.rows, strict=True)] == [("axes.jsonl[sentiment]", 12)]
    assert all(row.instruction == "Sentiment?" for row in stream.rows[0])
    with pytest.raises(DataError, match=r"axes\.jsonl: skip_instructions: no row has the instruction 'Domian\?'"):
        ContrastiveStream([FileSpec(str(path), skip_instructions=("Domian?",))], batch_size=4, hard_negatives=1, seed=0)


def test_axes_keeps_the_rows_of_one_label_axis_for_contrastive_and_single_texts(tmp_path):
    from genembed.training.data import DataError, SingleStream

    path = _axis_file(tmp_path)
    stream = ContrastiveStream([FileSpec(str(path), axes=("domain",))], batch_size=4, hard_negatives=1, seed=0)
    assert [len(r) for r in stream.rows] == [12]
    assert {row.instruction for row in stream.rows[0]} == {"Domain?"}
    assert {row.label.partition(":")[0] for row in stream.rows[0]} == {"domain"}

    # single texts: the domain rows' texts under the domain instruction; no sentiment row's own text
    single = SingleStream(
        [FileSpec(str(path), symmetric=True, axes=("domain",))], batch_size=6, seed=0, instruction="row"
    )
    drawn = set()
    for _ in range(8):
        texts, instructions = single.next()
        drawn.update(zip(texts, instructions, strict=True))
    assert {inst for _, inst in drawn} == {"Domain?"}
    assert {text[0] for text, _ in drawn} == {"r", "d", "e"}  # queries, positives, negatives of domain rows
    assert len(single.texts[0]) == 36
    bare = SingleStream([FileSpec(str(path), axes=("sentiment",))], batch_size=6, seed=0)
    assert sorted({t[0] for t in bare.texts[0]}) == ["r", "s", "t"] and len(bare.texts[0]) == 36

    with pytest.raises(
        DataError, match=r"axes\.jsonl: axes: no row has the axis 'topic' \(the file has \['domain', 'sentiment'\]\)"
    ):
        ContrastiveStream([FileSpec(str(path), axes=("topic",))], batch_size=4, hard_negatives=1, seed=0)
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"query": "a", "pos": ["b"], "label": "domain:x"}\n{"query": "c", "pos": ["d"]}\n')
    with pytest.raises(DataError, match=r"plain\.jsonl: row 2: axes needs a label 'axis:class', got None"):
        SingleStream([FileSpec(str(plain), axes=("domain",))], batch_size=2, seed=0)
    texts = tmp_path / "texts.jsonl"
    texts.write_text('{"text": "a"}\n{"text": "b"}\n')
    with pytest.raises(DataError, match=r"texts\.jsonl: skip_instructions and axes choose rows of a contrastive file"):
        SingleStream([FileSpec(str(texts), axes=("domain",))], batch_size=2, seed=0)


def test_axes_reaches_the_streams_from_a_config(tmp_path):
    from genembed.training.config import DataFile
    from genembed.training.data import expand_files

    (spec,) = expand_files([DataFile(str(_axis_file(tmp_path)), axes=["domain"])])
    assert spec.axes == ("domain",)


def test_distill_flag_follows_each_rows_file_through_top_ups_and_shards(tmp_path):
    from genembed.training.config import DataFile
    from genembed.training.data import expand_files

    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    small.write_text("".join(f'{{"query": "s{i}", "pos": ["sp{i}"]}}\n' for i in range(3)))
    big.write_text("".join(f'{{"query": "b{i}", "pos": ["bp{i}"]}}\n' for i in range(40)))
    specs = expand_files([DataFile(str(small), weight=100.0, distill=False), DataFile(str(big), weight=1.0)])
    assert [s.distill for s in specs] == [False, True]
    stream = ContrastiveStream(specs, batch_size=6, hard_negatives=0, seed=0)
    mixed = 0
    for _ in range(10):
        batch = stream.next()
        assert batch.distilled == [q.startswith("b") for q in batch.queries]
        assert batch.distill_tensor().tolist() == batch.distilled
        mixed += len(set(batch.distilled)) == 2  # the small file topped up from the big one
        shards = [batch.shard(rank, 2) for rank in (0, 1)]
        assert [flag for shard in shards for flag in shard.distilled] == batch.distilled
    assert mixed > 0
    # a batch built without flags distills every row
    rows = [ContrastiveRow("q", ("p",), (), ""), ContrastiveRow("r", ("s",), (), "")]
    assert build_contrastive_batch(rows, hard_negatives=0, rng=np.random.default_rng(0)).distill_tensor().all()


def test_share_schedule_gives_each_source_its_share_at_every_point():
    from genembed.training.data import ShareSchedule

    schedule = ShareSchedule({"contrastive": 0.3, "single": 0.7})
    plan = schedule.plan(200)
    for n in range(1, 201):  # evenly spread: never more than one step from the share
        assert abs(plan[:n].count("single") - 0.7 * n) <= 1
    assert schedule.counts(200) == {"contrastive": 60, "single": 140}
    assert schedule.plan(50) == plan[:50] and [schedule.next() for _ in range(37)] == plan[:37]
    assert ShareSchedule({"a": 2.0, "b": 2.0}).counts(0) == {"a": 0, "b": 0}
    with pytest.raises(ValueError, match="shares must be > 0"):
        ShareSchedule({"a": 1.0, "b": 0.0})


def test_file_shares_fix_each_files_part_of_the_batches_and_the_rest_goes_by_weight(tmp_path):
    import json

    def write(name, n, label=None):
        rows = [
            {"query": f"{name} q{i}", "pos": [f"{name} d{i}"], **({"label": label(i)} if label else {})}
            for i in range(n)
        ]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    files = [
        FileSpec(write("cls", 40), share=0.2),
        FileSpec(
            write("axes", 40, lambda i: "sentiment:pos" if i % 4 else "domain:movie"), share=0.4, batch_by_axis=True
        ),
        FileSpec(write("big", 400)),
        FileSpec(write("small", 100)),
    ]
    stream = ContrastiveStream(files, batch_size=4, hard_negatives=0, seed=0)
    counts = Counter()
    for _ in range(200):
        stream.next()
        counts[next(iter(stream.last_rows))] += 1
    # fixed: 0.2 and 0.4 (the axes 3:1 by rows) exactly; the remaining 0.4 by weight (rows): 0.32 / 0.08, drawn
    assert counts["cls.jsonl"] == 40 and counts["axes.jsonl[sentiment]"] == 60 and counts["axes.jsonl[domain]"] == 20
    assert counts["big.jsonl"] + counts["small.jsonl"] == 80 and counts["big.jsonl"] > 2 * counts["small.jsonl"]
    shares = {item["path"].rsplit("/", 1)[1] + item.get("axis", ""): item["share"] for item in stream.summary()}
    assert shares == {"cls.jsonl": 0.2, "axes.jsonlsentiment": 0.3, "axes.jsonldomain": 0.1, "big.jsonl": 0.32,
                      "small.jsonl": 0.08}  # fmt: skip
    # the same stream with shares that leave nothing for the files without one is refused
    bad = [FileSpec(files[0].path, share=0.6), FileSpec(files[1].path, share=0.4), FileSpec(files[2].path)]
    with pytest.raises(DataError, match="file shares sum to 1, leaving nothing for the 1 files without a share"):
        ContrastiveStream(bad, batch_size=4, hard_negatives=0, seed=0)
    with pytest.raises(DataError, match="every file has a share, so the shares must sum to 1, got 0.5"):
        ContrastiveStream([FileSpec(files[0].path, share=0.5)], batch_size=4, hard_negatives=0, seed=0)


def test_single_pairs_follow_each_drawn_text_with_a_text_of_its_row(tmp_path):
    from genembed.training.data import SingleStream

    path = tmp_path / "sts.jsonl"
    rows = [f'{{"query": "q{i}", "pos": ["p{i}"], "neg": ["n{i}"], "instruction": "Same?"}}\n' for i in range(30)]
    path.write_text("".join(rows))
    row_of = {f"{kind}{i}": i for i in range(30) for kind in "qpn"}
    spec = FileSpec(str(path), symmetric=True)
    stream = SingleStream([spec], batch_size=8, seed=3, instruction="row", pairs=True)
    batches = []
    for _ in range(12):
        texts, instructions = stream.next()
        assert 4 < len(texts) == len(set(texts)) <= 8 and set(instructions) == {"Same?"}
        # every text has a text of its row beside it: its partner, or (drawn with its row-mates) theirs
        assert all(sum(row_of[a] == row_of[b] for b in texts) >= 2 for a in texts)
        batches.append(texts)
    assert sum(len(texts) == 8 for texts in batches) >= 8  # a drawn text rarely finds its row taken
    # a resumed stream draws the same batches, partners included
    resumed = SingleStream([spec], batch_size=8, seed=3, instruction="row", pairs=True)
    resumed.skip(7)
    assert [resumed.next()[0] for _ in range(5)] == batches[7:]
    # without pairs, the same file gives strangers: hardly ever two texts of one row side by side
    plain = SingleStream([spec], batch_size=8, seed=3, instruction="row")
    together = 0
    for _ in range(12):
        texts = plain.next()[0]
        together += sum(row_of[a] == row_of[b] for a, b in zip(texts[::2], texts[1::2], strict=True))
    assert together < 12

    # bare texts: a text shared by two rows has the partners of both; a partner already drawn is not repeated
    shared = tmp_path / "shared.jsonl"
    shared.write_text('{"query": "a", "pos": ["b"]}\n{"query": "c", "pos": ["b"]}\n')
    bare = SingleStream([FileSpec(str(shared))], batch_size=4, seed=0, pairs=True)
    assert bare.partners == [[[1], [0, 2], [1]]]  # one file: a, b, c in first-seen order
    texts, _ = bare.next()
    assert sorted(texts) == ["a", "b", "c"]  # two drawn texts, one partner free: the batch is one short

    texts_file = tmp_path / "texts.jsonl"
    texts_file.write_text('{"text": "a"}\n{"text": "b"}\n')
    with pytest.raises(DataError, match=r"texts\.jsonl: single\.pairs draws texts of the same row: a texts file"):
        SingleStream([FileSpec(str(texts_file))], batch_size=2, seed=0, pairs=True)


def _window_spread(sampler: MixtureSampler, files: int, batches: int) -> float:
    """The largest distance between a file's batches among the next ``batches`` and its share of them."""
    counts = Counter(sampler.next_batch()[0][0] for _ in range(batches))
    return max(abs(counts[f] - sampler.probs[f] * batches) for f in range(files))


def test_even_file_order_gives_every_file_its_share_of_a_short_run():
    weights = [1.0] * 19 + [0.5]  # twenty files, as a teacher stage's single texts
    # a random draw by weight strays far from the shares over 30 batches; the even schedule stays within one
    random_spread = max(_window_spread(MixtureSampler([50] * 20, weights, 4, seed=s), 20, 30) for s in range(20))
    even_spread = max(
        _window_spread(MixtureSampler([50] * 20, weights, 4, seed=s, even=True), 20, 30) for s in range(20)
    )
    assert random_spread > 3 and even_spread <= 1
    # the seed sets where the schedule starts: other seeds, other files first (a small file's turn moves)
    firsts = {MixtureSampler([50] * 20, weights, 4, seed=s, even=True).next_batch()[0][0] for s in range(8)}
    assert len(firsts) > 3
    # deterministic and resumable: a skipped stream continues the same batches
    a, b = (MixtureSampler([50] * 20, weights, 4, seed=5, even=True) for _ in range(2))
    drawn = [a.next_batch() for _ in range(12)]
    b.skip(7)
    assert [b.next_batch() for _ in range(5)] == drawn[7:]
    with pytest.raises(ValueError, match="an even file schedule chooses each batch's file: it needs one_file_per"):
        MixtureSampler([50, 50], [1.0, 1.0], 4, seed=0, even=True, one_file_per_batch=False)


def test_even_file_order_keeps_fixed_shares_and_splits_the_rest_by_weight(tmp_path):
    import json

    paths = []
    for name, n in (("cls", 40), ("big", 300), ("small", 100)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(
            "".join(json.dumps({"query": f"{name} q{i}", "pos": [f"{name} d{i}"]}) + "\n" for i in range(n))
        )
        paths.append(str(path))
    files = [FileSpec(paths[0], share=0.5), FileSpec(paths[1]), FileSpec(paths[2])]
    stream = ContrastiveStream(files, batch_size=4, hard_negatives=0, seed=0, file_order="even")
    counts = Counter()
    for _ in range(40):
        stream.next()
        counts[next(iter(stream.last_rows))] += 1
    # 0.5 fixed; the other half by rows, 3:1, exactly over 40 batches (no random draw left)
    assert counts == {"cls.jsonl": 20, "big.jsonl": 15, "small.jsonl": 5}
    with pytest.raises(ValueError, match="^data.file_order must be one of random, even, got 'evenly'$"):
        ContrastiveStream(files, batch_size=4, hard_negatives=0, seed=0, file_order="evenly")


def test_even_file_order_reaches_both_streams_from_a_config(tmp_path):
    from genembed.training.config import ConfigError, load_config

    config = tmp_path / "run.yaml"
    config.write_text("data:\n  file_order: even\nsingle:\n  file_order: even\n")
    cfg = load_config(config)
    assert (cfg.data.file_order, cfg.single.file_order) == ("even", "even")
    config.write_text("single:\n  file_order: sorted\n")
    with pytest.raises(ConfigError, match="single.file_order must be one of \\['random', 'even'\\], got 'sorted'"):
        load_config(config)
