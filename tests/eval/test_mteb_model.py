"""The mteb 2.x adapter, offline: local STS and retrieval tasks whose load_data sets the data; mteb's
scores must equal the harness's scores for the same texts and instructions."""

from __future__ import annotations

import numpy as np
import pytest

mteb = pytest.importorskip("mteb")

from datasets import Dataset, DatasetDict  # noqa: E402
from mteb.abstasks.retrieval import AbsTaskRetrieval  # noqa: E402
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData  # noqa: E402
from mteb.abstasks.sts import AbsTaskSTS  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402
from mteb.types import PromptType  # noqa: E402

from genembed.eval import GenembedEncoder, evaluate  # noqa: E402
from genembed.eval.mteb_model import GenembedMTEBModel  # noqa: E402

GENERAL = {
    "description": "a local test task",
    "reference": "https://example.com",
    "dataset": {"path": "NA", "revision": "NA"},
    "category": "t2t",
    "eval_splits": ["test"],
    "eval_langs": ["eng-Latn"],
    "date": ("2024-01-01", "2024-01-01"),
    "dialect": [],
    "domains": [],
    "task_subtypes": [],
    "license": "cc-by-4.0",
    "annotations_creators": "derived",
    "modalities": ["text"],
    "sample_creation": "found",
    "bibtex_citation": "",
}
S1 = ["a cat sleeps", "the dog runs", "sun and rain", "tax law", "the road", "a man plays guitar"]
S2 = ["a cat naps", "a dog runs fast", "rain and wind", "a red car", "a cat sleeps", "a man plays music"]
SCORES = [4.5, 4.0, 2.5, 0.5, 1.0, 3.5]
CORPUS = [
    {"id": "d1", "title": "Cats", "text": "a cat sleeps all day"},
    {"id": "d2", "title": "", "text": "dogs run in the park"},
    {"id": "d3", "title": "Tax", "text": "tax law is complex"},
    {"id": "d4", "title": "Cars", "text": "a car on the road"},
]
QUERIES = [{"id": "q1", "text": "cat"}, {"id": "q2", "text": "tax law"}, {"id": "q3", "text": "car road"}]
QRELS = {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d4": 1, "d2": 1}}


class LocalSTS(AbsTaskSTS):
    metadata = TaskMetadata(type="STS", name="GenembedLocalSTS", main_score="cosine_spearman", **GENERAL)
    min_score, max_score = 0, 5

    def load_data(self, **kwargs):
        data = {"sentence1": S1, "sentence2": S2, "score": SCORES}
        self.dataset = DatasetDict({"test": Dataset.from_dict(data)})
        self.data_loaded = True


class LocalRetrieval(AbsTaskRetrieval):
    metadata = TaskMetadata(type="Retrieval", name="GenembedLocalRetrieval", main_score="ndcg_at_10", **GENERAL)

    def load_data(self, **kwargs):
        split = RetrievalSplitData(
            queries=Dataset.from_list(QUERIES), corpus=Dataset.from_list(CORPUS), relevant_docs=QRELS, top_ranked=None
        )
        self.dataset = {"default": {"test": split}}
        self.data_loaded = True


def _main_score(model, task) -> float:
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False)
    return result.task_results[0].scores["test"][0]["main_score"] * 100


def test_sts_matches_the_harness(tiny_model, tmp_path, make_task):
    instruction = "Retrieve semantically similar text."
    model = GenembedMTEBModel(model=tiny_model, steps=3, prompts_dict={"GenembedLocalSTS": instruction})
    score = _main_score(model, LocalSTS())
    pairs = [{"s1": a, "s2": b, "score": s} for a, b, s in zip(S1, S2, SCORES, strict=True)]
    folder = make_task(
        tmp_path, "sts", {"type": "sts", "metric": "spearman", "instruction": instruction}, {"pairs.jsonl": pairs}
    )
    ours = evaluate(GenembedEncoder(tiny_model, steps=3), [folder], progress=False).tasks[0].scores[0]
    assert score == pytest.approx(ours, abs=1e-6)


def test_retrieval_matches_the_harness_with_query_instructions_only(tiny_model, tmp_path, make_task):
    instruction = "Given a query, retrieve relevant passages."
    model = GenembedMTEBModel(model=tiny_model, method="mean", prompts_dict={"GenembedLocalRetrieval": instruction})
    score = _main_score(model, LocalRetrieval())
    qrels = "".join(f"{q}\t{d}\t{g}\n" for q, docs in QRELS.items() for d, g in docs.items())
    meta = {"type": "retrieval", "metric": "ndcg@10", "instruction": instruction, "doc_instruction": ""}
    folder = make_task(tmp_path, "ret", meta, {"corpus.jsonl": CORPUS, "queries.jsonl": QUERIES, "qrels.tsv": qrels})
    ours = evaluate(GenembedEncoder(tiny_model, method="mean"), [folder], progress=False).tasks[0].scores[0]
    assert score == pytest.approx(ours, abs=1e-3)  # mteb rounds its scores to 5 decimals


def test_instructions_by_prompt_type_and_model_meta(tiny_model):
    model = GenembedMTEBModel(model=tiny_model, steps=2, prompts_dict={"GenembedLocalRetrieval": "Find it."})
    meta = LocalRetrieval.metadata
    assert model.instruction_for(meta, PromptType.query) == "Find it."
    assert model.instruction_for(meta, PromptType.document) == ""
    assert (
        GenembedMTEBModel(model=tiny_model, instruct_documents=True, prompts_dict={"Retrieval": "R"}).instruction_for(
            meta, PromptType.document
        )
        == "R"
    )
    # without prompts_dict, mteb's default prompt for the task type is used
    assert GenembedMTEBModel(model=tiny_model).instruction_for(LocalSTS.metadata, None) == LocalSTS.abstask_prompt
    info = model.mteb_model_meta
    assert info.name == "genembed/tiny-llama-0" and info.embed_dim == tiny_model.dim
    assert info.experiment_kwargs["method"] == "gircse" and info.experiment_kwargs["steps"] == 2
    assert info.use_instructions and info.n_parameters == sum(p.numel() for p in tiny_model.backbone.model.parameters())
    embeddings = model.encode(
        [{"text": ["a b", "c"]}, {"text": ["d"]}],
        task_metadata=meta,
        hf_split="test",
        hf_subset="default",
        prompt_type=PromptType.query,
    )
    np.testing.assert_allclose(
        embeddings, tiny_model.encode(["a b", "c", "d"], instruction="Find it.", steps=2), atol=1e-6
    )
    with pytest.raises(ValueError, match="method must be one of"):
        GenembedMTEBModel(model=tiny_model, method="max")


class STSBenchmark(LocalSTS):  # named as the MTEB task, so a published model's instruction applies
    metadata = TaskMetadata(type="STS", name="STSBenchmark", main_score="cosine_spearman", **GENERAL)


class SciFact(LocalRetrieval):
    metadata = TaskMetadata(type="Retrieval", name="SciFact", main_score="ndcg_at_10", **GENERAL)


def test_a_published_gircse_checkpoint_is_evaluated_with_its_authors_instruction_and_k(published_gircse):
    """GenembedMTEBModel("Roytsai27/GIRCSE-Mistral7B"): the tiny reference adapter under the published id;
    STSBenchmark texts get GIRCSE's own instruction, K is its evaluation K (3), embeddings L2-normalised."""
    model = GenembedMTEBModel("Roytsai27/GIRCSE-Mistral7B", device="cpu")
    assert model.instruction_for(STSBenchmark.metadata, None) == "Retrieve semantically similar text."
    assert model.encode_settings["steps"] == 3 and model.encode_settings["prompt_format"] == "gircse"
    meta = model.mteb_model_meta.experiment_kwargs
    assert meta["instructions"].endswith("GIRCSE@20676c15294e161bcfd5d5be97e75498e54fdb8f") and meta["steps"] == 3
    texts = ["a cat sleeps", "the dog runs"]
    got = model.encode([{"text": texts}], task_metadata=STSBenchmark.metadata, hf_split="test", hf_subset="default")
    expected = model.model.encode(texts, instruction="Retrieve semantically similar text.", steps=3)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert not np.allclose(got, model.model.encode(texts, instruction="Retrieve semantically similar text.", steps=5))
    # the caller's prompts_dict takes over from the authors' instructions
    mine = GenembedMTEBModel(model=model.model, prompts_dict={"STSBenchmark": "Mine."})
    assert mine.instruction_for(STSBenchmark.metadata, None) == "Mine." and mine.published is None


def test_a_published_gritlm_checkpoint_uses_its_query_and_document_instructions_unnormalised(fake_hub, tiny_folder):
    fake_hub("GritLM/GritLM-7B", tiny_folder)
    model = GenembedMTEBModel("GritLM/GritLM-7B", device="cpu")
    claim = "Given a scientific claim, retrieve documents that support or refute the claim"
    assert model.instruction_for(SciFact.metadata, PromptType.query) == claim
    assert model.instruction_for(SciFact.metadata, PromptType.document) == ""
    assert (model.encode_settings["method"], model.encode_settings["prompt_format"]) == ("grit", "gritlm")
    got = model.encode(
        [{"text": ["a claim"]}],
        task_metadata=SciFact.metadata,
        hf_split="test",
        hf_subset="default",
        prompt_type=PromptType.query,
    )
    raw = model.model.encode(["a claim"], instruction=claim, normalize=False)
    np.testing.assert_allclose(got, raw, rtol=1e-5)
    assert abs(np.linalg.norm(got) - 1.0) > 1e-3  # GritLM's MTEB run does not L2-normalise
    # a task the authors' table lacks falls back to the task's own prompt
    assert model.instruction_for(LocalSTS.metadata, None) == LocalSTS.abstask_prompt


def test_each_published_model_has_its_authors_instruction_for_every_task_of_its_benchmark():
    from genembed.models.published import PUBLISHED

    for entry in PUBLISHED.values():
        if entry.instructions is None:  # a family whose authors publish no per-task table with their code
            continue
        names = [task.metadata.name for task in mteb.get_benchmark(entry.benchmark).tasks]
        assert names and [n for n in names if entry.instruction_set().entry(n) is None] == [], entry.id


def test_the_mteb_command_runs_a_published_model_on_its_authors_benchmark(fake_hub, tiny_folder, monkeypatch):
    """`genembed mteb --model GritLM/GritLM-7B` (tiny weights under the published id): the benchmark its
    authors report, its own instructions; mteb.evaluate is replaced (its datasets need the network)."""
    from typer.testing import CliRunner

    from genembed.cli.app import app

    fake_hub("GritLM/GritLM-7B", tiny_folder)
    seen, real = {}, mteb.evaluate

    def evaluate(model, tasks, **kwargs):
        seen["instruction"] = model.instruction_for(SciFact.metadata, PromptType.query)
        seen["tasks"] = [task.metadata.name for task in tasks]
        return real(model, [LocalSTS()], cache=None, show_progress_bar=False)

    monkeypatch.setattr(mteb, "evaluate", evaluate)
    result = CliRunner().invoke(app, ["mteb", "--model", "GritLM/GritLM-7B", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert len(seen["tasks"]) == 56 and "ArguAna" in seen["tasks"]  # MTEB(eng, v1)
    assert seen["instruction"].startswith("Given a scientific claim")
    assert "GritLM/GritLM-7B's own instructions" in result.output and "GenembedLocalSTS" in result.output
    bad = CliRunner().invoke(app, ["mteb", "--model", "GritLM/GritLM-7B", "--tasks", "A", "--benchmark", "B"])
    assert bad.exit_code == 2 and "give --tasks or --benchmark" in bad.output
