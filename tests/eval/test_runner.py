"""The harness with deterministic fake encoders: instructions reach the right texts, scores equal
direct computations, sweeps, caching and resuming, rerank, reports."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import spearmanr

from genembed.eval import EmbeddingCache, evaluate, load_task
from genembed.eval.metrics import l2_normalize


def test_instructions_reach_the_right_texts(toy_tasks, bag_of_words):
    encoder = bag_of_words(cache_key=None)
    evaluate(encoder, [toy_tasks], progress=False)
    seen: dict[str, set[str]] = {}
    for texts, instruction in encoder.calls:
        for text in texts:
            seen.setdefault(text, set()).add(instruction)
    assert seen["a cat naps"] == {"Find similar text.", "Same meaning?"}  # s2 of the sts and the pair task
    assert seen["the cat"] == {"Classify."} and seen["cat cat thing"] == {"Classify."}  # classification
    assert seen["cat cat 0"] == {"Topic?"}
    assert seen["tax law"] >= {"Find documents."}  # query (also an sts text)
    assert seen["Cats a cat sleeps all day"] == {""}  # document: title + " " + text, doc_instruction
    assert seen["dogs run in the park"] == {""}
    assert seen["good movie item 0"] == {"Sentiment?", "Domain?", ""}  # instruct: each axis + the task field


def test_scores_equal_a_direct_computation(toy_tasks, bag_of_words):
    encoder = bag_of_words(cache_key=None)
    report = evaluate(encoder, [toy_tasks / "toy-sts", toy_tasks / "toy-retrieval"], progress=False)
    sts = load_task(toy_tasks / "toy-sts").data
    a = l2_normalize(np.stack([encoder.vector(t, "Find similar text.") for t in sts.s1]))
    b = l2_normalize(np.stack([encoder.vector(t, "Find similar text.") for t in sts.s2]))
    expected = spearmanr((a * b).sum(1), sts.targets).statistic * 100
    assert report.tasks[0].scores == [pytest.approx(expected)]
    # retrieval: bag of words finds every relevant document; q3 has two (d4 at rank 1, d2 lower)
    data = load_task(toy_tasks / "toy-retrieval").data
    q = l2_normalize(np.stack([encoder.vector(t, "Find documents.") for t in data.query_texts]))
    d = l2_normalize(np.stack([encoder.vector(t) for t in data.doc_texts]))
    from genembed.eval.metrics import ndcg_at_k

    ranked = np.argsort(-(q @ d.T), axis=1, kind="stable")
    per_query = [
        ndcg_at_k([data.doc_ids[i] for i in row], data.qrels[qid])
        for qid, row in zip(data.query_ids, ranked, strict=True)
    ]
    assert report.tasks[1].scores == [pytest.approx(np.mean(per_query))]
    assert report.tasks[1].info["queries"] == 3


class AxisFollower:
    """Embeds an instruct text by the label named in its instruction: a perfect instruction follower."""

    name, cache_key = "axis-follower", None

    def encode(self, texts, *, instruction):
        sentiment, domain = ["good", "bad"], ["movie", "phone"]
        out = []
        for text in texts:
            words = text.split()
            if instruction == "Sentiment?":
                out.append(np.eye(4)[sentiment.index(words[0])])
            elif instruction == "Domain?":
                out.append(np.eye(4)[2 + domain.index(words[1])])
            else:
                out.append(np.ones(4) + 0.01 * len(text))
        return np.array(out)


def test_instruct_scores_own_cross_and_gap(toy_tasks):
    report = evaluate(AxisFollower(), [toy_tasks / "toy-instruct"], progress=False)
    task = report.tasks[0]
    d = task.details[0]
    assert d["axis:sentiment"] == pytest.approx(100.0) and d["axis:domain"] == pytest.approx(100.0)
    assert task.scores == [pytest.approx(100.0)]
    # sentiment clustered from domain-instructed embeddings: independent labels, V-measure 0
    assert d["cross:sentiment<-domain"] == pytest.approx(0.0, abs=1e-9)
    assert d["cross:domain<-sentiment"] == pytest.approx(0.0, abs=1e-9)
    assert d["gap"] == pytest.approx(100.0)
    assert task.info["axes"] == {"sentiment": 2, "domain": 2}
    assert {"task:sentiment", "task:domain", "cross_mean"} <= set(d)


def test_cluster_starts_score_the_mean_over_k_means_seeds(toy_tasks, tmp_path):
    from genembed.eval.metrics import cluster_v_measure

    encoder = Noisy()
    tasks = [toy_tasks / "toy-clustering", toy_tasks / "toy-instruct"]
    one = evaluate(encoder, tasks, progress=False)
    five = evaluate(encoder, tasks, progress=False, cluster_starts=5, out=tmp_path / "five.json")
    data = load_task(toy_tasks / "toy-clustering").data
    x = l2_normalize(encoder.encode(data.texts, instruction=load_task(toy_tasks / "toy-clustering").instruction))
    by_seed = [cluster_v_measure(x, data.labels, seed=s) for s in range(42, 47)]
    assert one.tasks[0].scores == [pytest.approx(by_seed[0])]
    assert five.tasks[0].scores == [pytest.approx(np.mean(by_seed))]
    assert len(set(by_seed)) > 1  # otherwise the test could not tell one start from five
    instruct = load_task(toy_tasks / "toy-instruct")
    y = l2_normalize(encoder.encode(instruct.data.texts, instruction=instruct.instructions["sentiment"]))
    expected = np.mean([cluster_v_measure(y, instruct.data.labels["sentiment"], seed=s) for s in range(42, 47)])
    assert five.tasks[1].details[0]["axis:sentiment"] == pytest.approx(expected)
    assert one.config["cluster_starts"] == 1 and five.config["cluster_starts"] == 5
    assert "k-means starts 5" in (tmp_path / "five.md").read_text()
    with pytest.raises(ValueError, match="cluster_starts must be at least 1"):
        evaluate(encoder, tasks, progress=False, cluster_starts=0)


class Noisy:
    """Random vectors seeded by text and instruction: clusters that k-means splits differently per seed."""

    name, cache_key = "noisy", None

    def encode(self, texts, *, instruction):
        return np.stack([np.random.default_rng(abs(hash((t, instruction))) % 2**32).normal(size=8) for t in texts])


class Sweep:
    """A sweep encoder: view k is the bag of words plus k-dependent noise."""

    name = "sweep"
    views = (1, 2, 4)

    def __init__(self, bow, cache_key="sweep-1", fail_after=None):
        self.bow, self.cache_key, self.fail_after, self.encoded = bow, cache_key, fail_after, 0

    def view(self, text, instruction, k):
        rng = np.random.default_rng(abs(hash((text, k))) % 2**32)
        return self.bow.vector(text, instruction) + rng.normal(scale=1.0 / k, size=self.bow.dim)

    def encode_views(self, texts, *, instruction):
        if self.fail_after is not None and self.encoded + len(texts) > self.fail_after:
            raise RuntimeError("simulated crash")
        self.encoded += len(texts)
        return np.stack([[self.view(t, instruction, k) for k in self.views] for t in texts])

    def encode(self, texts, *, instruction):
        return self.encode_views(texts, instruction=instruction)[:, -1]


@dataclass
class SingleView:
    """One view of a sweep encoder as a plain encoder (for comparing with the sweep)."""

    sweep: Sweep
    k: int
    name: str = "single"
    cache_key: str | None = None

    def encode(self, texts, *, instruction):
        return np.stack([self.sweep.view(t, instruction, self.k) for t in texts])


def test_one_sweep_run_scores_every_view_like_separate_runs(toy_tasks, bag_of_words):
    sweep = Sweep(bag_of_words())
    report = evaluate(sweep, [toy_tasks], progress=False)
    assert report.views == [1, 2, 4]
    for j, k in enumerate(sweep.views):
        single = evaluate(SingleView(sweep, k), [toy_tasks], progress=False)
        for swept, alone in zip(report.tasks, single.tasks, strict=True):
            assert swept.scores[j] == pytest.approx(alone.scores[0], abs=1e-9), (swept.name, k)


def test_cache_serves_reruns_and_resumes_after_a_crash(toy_tasks, bag_of_words, tmp_path):
    path = tmp_path / "cache.sqlite"
    crashing = Sweep(bag_of_words(), fail_after=30)
    with pytest.raises(RuntimeError, match="simulated crash"):
        evaluate(crashing, [toy_tasks], cache=EmbeddingCache(path), progress=False)
    assert crashing.encoded > 0
    resumed = Sweep(bag_of_words())
    first = evaluate(resumed, [toy_tasks], cache=EmbeddingCache(path), progress=False)
    total_unique = sum(t.encoding["encoded"] + t.encoding["cached"] for t in first.tasks)
    assert sum(t.encoding["cached"] for t in first.tasks) >= crashing.encoded  # the crashed run's chunks were kept
    assert resumed.encoded == total_unique - sum(t.encoding["cached"] for t in first.tasks)
    again = Sweep(bag_of_words())
    second = evaluate(again, [toy_tasks], cache=EmbeddingCache(path), progress=False)
    assert again.encoded == 0
    assert [t.scores for t in second.tasks] == [t.scores for t in first.tasks]
    uncached = evaluate(Sweep(bag_of_words(), cache_key=None), [toy_tasks], progress=False)
    flat = [s for t in first.tasks for s in t.scores]
    assert [s for t in uncached.tasks for s in t.scores] == pytest.approx(flat, abs=1e-4)


def test_cache_keys_separate_encoders_and_instructions(toy_tasks, bag_of_words, tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    evaluate(bag_of_words(cache_key="a"), [toy_tasks / "toy-sts"], cache=cache, progress=False)
    other = bag_of_words(cache_key="b")
    evaluate(other, [toy_tasks / "toy-sts"], cache=cache, progress=False)
    assert other.calls  # a different key encodes again
    task = load_task(toy_tasks / "toy-sts")
    task.instruction = "Another instruction."
    third = bag_of_words(cache_key="a")
    evaluate(third, [task], cache=cache, progress=False)
    assert {ins for _, ins in third.calls} == {"Another instruction."}


@dataclass
class Result:
    index: int
    score: float
    document: str


class OracleReranker:
    """Scores a document by how many words it shares with the answer key of the query."""

    def __init__(self):
        self.calls = []

    def rerank(self, query, documents, top_n=None, instruction=None, batch_size=8):
        self.calls.append((query, list(documents), instruction))
        key = {"cat": "dogs", "tax law": "tax", "car road": "car"}[query]  # q1's best becomes d2 (not relevant)
        scored = [Result(i, float(key in d.lower()), d) for i, d in enumerate(documents)]
        return sorted(scored, key=lambda r: -r.score)


def test_rerank_reorders_the_top_n_and_keeps_the_first_stage_score(toy_tasks, bag_of_words):
    reranker = OracleReranker()
    task = toy_tasks / "toy-retrieval"
    plain = evaluate(bag_of_words(cache_key=None), [task], progress=False).tasks[0]
    reranked = evaluate(bag_of_words(cache_key=None), [task], reranker=reranker, rerank_top=4, progress=False).tasks[0]
    assert reranked.details[0]["first_stage"] == pytest.approx(plain.scores[0])
    # q1's relevant d1 drops below d2; q2 and q3 keep a relevant document first
    assert reranked.scores[0] < plain.scores[0]
    assert {ins for _, _, ins in reranker.calls} == {"Find documents."}
    assert all(len(docs) == 4 for _, docs, _ in reranker.calls)
    assert reranked.info["reranked_pairs"] == 12
    with pytest.raises(ValueError, match="needs a reranker"):
        evaluate(bag_of_words(cache_key=None), [task], rerank_top=3, progress=False)


def test_rerank_scores_are_shared_across_sweep_views(toy_tasks, bag_of_words):
    reranker = OracleReranker()
    report = evaluate(
        Sweep(bag_of_words(), cache_key=None),
        [toy_tasks / "toy-retrieval"],
        reranker=reranker,
        rerank_top=4,
        progress=False,
    )
    assert len(report.tasks[0].scores) == 3
    assert len(reranker.calls) == 3  # one call per query: later views reuse the scores of the same pairs


def test_reports_json_markdown_and_plot(toy_tasks, bag_of_words, tmp_path):
    out = tmp_path / "out" / "results.json"
    report = evaluate(Sweep(bag_of_words()), [toy_tasks], out=out, progress=False)
    payload = json.loads(out.read_text())
    assert payload["complete"] is True
    assert payload["steps"] == [1, 2, 4]
    assert [t["name"] for t in payload["tasks"]] == [t.name for t in report.tasks]
    sts = next(t for t in payload["tasks"] if t["name"] == "toy-sts")
    assert set(sts["scores"]) == {"K=1", "K=2", "K=4"} and sts["score"] == sts["scores"]["K=4"]
    assert sts["seconds"] >= 0 and "encode_seconds" in sts
    assert payload["mean"]["score"] == pytest.approx(np.mean([t["score"] for t in payload["tasks"]]))
    md = out.with_suffix(".md").read_text()
    assert "| toy-sts | sts | spearman |" in md
    assert "## Test-time scaling" in md and "| K=1 | K=2 | K=4 | best K |" in md
    assert "## Instruction following" in md and "| toy-instruct | sentiment |" in md
    png = (tmp_path / "out" / "results_scaling.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    single = tmp_path / "single.json"
    evaluate(bag_of_words(), [toy_tasks / "toy-sts"], out=single, progress=False)
    assert json.loads(single.read_text())["tasks"][0]["scores"].keys() == {"single"}
    assert not (tmp_path / "single_scaling.png").exists()


def test_bad_encoder_output_is_a_clear_error(toy_tasks):
    class Broken:
        name, cache_key = "broken", None

        def encode(self, texts, *, instruction):
            return np.zeros((len(texts) + 1, 4))

    class NaNs(Broken):
        name = "nans"

        def encode(self, texts, *, instruction):
            return np.full((len(texts), 4), np.nan)

    with pytest.raises(ValueError, match=r"encoder 'broken' returned shape \(11, 1, 4\)|returned shape"):
        evaluate(Broken(), [toy_tasks / "toy-sts"], progress=False)
    with pytest.raises(ValueError, match="encoder 'nans' returned non-finite values"):
        evaluate(NaNs(), [toy_tasks / "toy-sts"], progress=False)


def test_duplicate_task_names_are_rejected(toy_tasks, tmp_path, make_task):
    make_task(
        tmp_path / "more",
        "x",
        {"name": "toy-sts", "type": "clustering", "metric": "v_measure"},
        {"data.jsonl": [{"text": "a", "label": 1}]},
    )
    with pytest.raises(ValueError, match="share the name 'toy-sts'"):
        evaluate(object(), [toy_tasks, tmp_path / "more"], progress=False)
