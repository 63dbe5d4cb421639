"""``genembed eval`` on a saved tiny model and toy task folders."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from genembed.cli.app import app

runner = CliRunner()


@pytest.fixture
def tiny_folder(tmp_path, tiny):
    folder = tmp_path / "tiny-model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def test_eval_sweep_writes_json_markdown_and_plot(tiny_folder, toy_tasks, tmp_path):
    out = tmp_path / "res" / "results.json"
    args = [
        "eval",
        str(toy_tasks),
        "--model",
        str(tiny_folder),
        "--steps",
        "1,2",
        "--cache-file",
        str(tmp_path / "c.sqlite"),
    ]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "toy-sts" in result.output and "mean" in result.output
    payload = json.loads(out.read_text())
    assert payload["config"]["steps"] == [1, 2] and payload["config"]["model"] == "tiny-model"
    assert len(payload["tasks"]) == 6 and payload["complete"]
    assert (tmp_path / "res" / "results.md").is_file() and (tmp_path / "res" / "results_scaling.png").is_file()
    again = runner.invoke(app, [*args, "--out", str(tmp_path / "again.json"), "--limit", "3"])
    assert again.exit_code == 0, again.output
    limited = json.loads((tmp_path / "again.json").read_text())
    assert limited["config"]["limit"] == 3 and limited["config"]["cluster_starts"] == 1
    assert all(t["encoding"]["encoded"] == 0 for t in limited["tasks"])  # every limited text is already cached
    starts = runner.invoke(app, [*args, "--out", str(tmp_path / "starts.json"), "--cluster-starts", "3"])
    assert starts.exit_code == 0, starts.output
    averaged = json.loads((tmp_path / "starts.json").read_text())
    assert averaged["config"]["cluster_starts"] == 3
    assert all(t["encoding"]["encoded"] == 0 for t in averaged["tasks"])  # re-scored from the cache


def test_eval_center_flag_centers_after_the_cache(tiny_folder, toy_tasks, tmp_path):
    args = ["eval", str(toy_tasks / "toy-sts"), "--model", str(tiny_folder), "--steps", "2"]
    args += ["--cache-file", str(tmp_path / "c.sqlite")]
    reports = {}
    for flag in ("--no-center", "--center"):
        out = tmp_path / f"{flag}.json"
        result = runner.invoke(app, [*args, flag, "--out", str(out)])
        assert result.exit_code == 0, result.output
        reports[flag] = json.loads(out.read_text())
    plain, centered = reports["--no-center"], reports["--center"]
    assert plain["config"]["center"] is False and centered["config"]["center"] is True
    assert centered["config"]["encoder"].endswith(" centered")
    assert centered["config"]["cache_key"] == plain["config"]["cache_key"]
    assert centered["tasks"][0]["encoding"]["encoded"] == 0  # raw embeddings come from the cache
    assert centered["tasks"][0]["scores"] != plain["tasks"][0]["scores"]


def test_eval_mean_with_rerank(tiny_folder, toy_tasks, tmp_path):
    out = tmp_path / "r.json"
    args = ["eval", str(toy_tasks / "toy-retrieval"), "--model", str(tiny_folder), "--method", "mean"]
    result = runner.invoke(app, [*args, "--rerank-top", "3", "--no-cache", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    task = report["tasks"][0]
    assert task["scores"].keys() == {"single"}
    assert "first_stage" in task["details"]["single"] and task["info"]["reranked_pairs"] == 9
    assert report["config"]["rerank_weights"] == "none"


def test_eval_reranks_with_a_generation_adapter(tiny_folder, toy_tasks, tmp_path):
    """--generator reranks with a second LoRA: the first stage is unchanged, the reranked scores are not."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_folder), config).save_pretrained(tmp_path / "gen")
    args = ["eval", str(toy_tasks / "toy-retrieval"), "--model", str(tiny_folder), "--method", "mean"]
    reports = []
    for extra in ([], ["--generator", str(tmp_path / "gen")]):
        out = tmp_path / f"r{len(reports)}.json"
        result = runner.invoke(app, [*args, *extra, "--rerank-top", "3", "--no-cache", "--out", str(out)])
        assert result.exit_code == 0, result.output
        reports.append(json.loads(out.read_text()))
    base, adapted = reports
    assert adapted["config"]["rerank_weights"].startswith("gen@sha256:")
    assert "reranked by gen@sha256:" in (tmp_path / "r1.md").read_text()
    assert "reranked by the base weights" in (tmp_path / "r0.md").read_text()
    first = [r["tasks"][0]["details"]["single"]["first_stage"] for r in reports]
    assert first[0] == first[1]
    assert base["tasks"][0]["scores"] != adapted["tasks"][0]["scores"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "mean", "--steps", "3"], "steps apply only to method 'gircse'"),
        (["--attention", "sideways"], "attention must be"),
        (["--steps", "1,x"], "steps must be comma-separated integers"),
        (["--cluster-starts", "0"], "--cluster-starts"),
    ],
)
def test_bad_settings_are_clean_errors(tiny_folder, toy_tasks, tmp_path, extra, message):
    result = runner.invoke(app, ["eval", str(toy_tasks / "toy-sts"), "--model", str(tiny_folder), "--no-cache", *extra])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_a_malformed_task_fails_before_the_model_loads(toy_tasks, tmp_path):
    (toy_tasks / "toy-sts" / "pairs.jsonl").write_text('{"s1": "a", "s2": "b", "score": 1}\n{"s1": "a", "s2": "b"}\n')
    result = runner.invoke(app, ["eval", str(toy_tasks), "--model", str(tmp_path / "missing-model")])
    assert result.exit_code == 2
    assert "pairs.jsonl:2: missing field 'score'" in result.output


def test_a_saved_model_is_evaluated_with_its_own_method_and_steps(tiny, toy_tasks, tmp_path):
    from genembed.model import GenerativeEmbedder

    saved = tmp_path / "saved"
    GenerativeEmbedder(tiny, method="gircse", steps=3).save(saved)
    args = ["eval", str(toy_tasks / "toy-sts"), "--model", str(saved), "--no-cache"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "own.json")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "own.json").read_text())["config"]
    assert (config["method"], config["steps"]) == ("gircse", [3])
    saved_mean = tmp_path / "saved-mean"
    GenerativeEmbedder(tiny, method="mean", attention="bidirectional").save(saved_mean)
    args = ["eval", str(toy_tasks / "toy-sts"), "--model", str(saved_mean), "--no-cache"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "mean.json")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "mean.json").read_text())["config"]
    assert (config["method"], config["attention"], config["steps"]) == ("mean", "bidirectional", None)
    # an explicit --method still wins
    result = runner.invoke(app, [*args, "--method", "last", "--out", str(tmp_path / "last.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "last.json").read_text())["config"]["method"] == "last"


def test_a_published_checkpoint_is_evaluated_with_its_authors_instructions_and_k(
    published_gircse, tmp_path, make_task, monkeypatch
):
    """`genembed eval --model Roytsai27/GIRCSE-Mistral7B` (the tiny reference under the published id): tasks
    of the authors' MTEB table get their instructions (by mteb_name or name), at K=3 in the gircse format;
    other tasks keep their own. Every encode call is recorded to show what was actually used."""
    from genembed.model import GenerativeEmbedder

    pairs = [{"s1": "a cat sleeps", "s2": "a cat naps", "score": 4.5}, {"s1": "tax law", "s2": "a car", "score": 0.5}]
    pairs.append({"s1": "the dog runs", "s2": "a dog runs fast", "score": 4.0})
    sts = {"type": "sts", "metric": "spearman", "instruction": "Mine.", "mteb_name": "STSBenchmark"}
    make_task(tmp_path / "tasks", "stsb-dev", sts, {"pairs.jsonl": pairs})
    make_task(
        tmp_path / "tasks",
        "toy-sts",
        {"type": "sts", "metric": "spearman", "instruction": "Own."},
        {"pairs.jsonl": pairs},
    )
    corpus = [{"id": "d1", "title": "", "text": "a cat"}, {"id": "d2", "title": "", "text": "tax law"}]
    queries = [{"id": "q1", "text": "cats"}]
    retrieval = {"type": "retrieval", "metric": "ndcg@10", "instruction": "Q.", "doc_instruction": "D."}
    make_task(
        tmp_path / "tasks",
        "SciFact",
        retrieval,
        {"corpus.jsonl": corpus, "queries.jsonl": queries, "qrels.tsv": "q1\td1\t1\n"},
    )
    calls = []
    real = GenerativeEmbedder.encode

    def spy(self, texts, **kwargs):
        calls.append((tuple(texts), kwargs["instruction"], kwargs["steps"], kwargs["prompt_format"]))
        return real(self, texts, **kwargs)

    monkeypatch.setattr(GenerativeEmbedder, "encode", spy)
    out = tmp_path / "published.json"
    args = ["eval", str(tmp_path / "tasks"), "--model", "Roytsai27/GIRCSE-Mistral7B", "--no-cache", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "its authors' instructions" in result.output and "for 2 of 3 tasks" in result.output
    by_instruction = {}
    for texts, instruction, steps, prompt_format in calls:
        assert (steps, prompt_format) == (3, "gircse")
        by_instruction.setdefault(instruction, set()).update(texts)
    claim = "Given a scientific claim, retrieve documents that support or refute the claim"
    assert by_instruction["Retrieve semantically similar text."] >= {"a cat sleeps", "tax law"}  # stsb-dev
    assert by_instruction["Own."] >= {"a cat sleeps"} and "Mine." not in by_instruction
    assert by_instruction[claim] == {"cats"} and by_instruction[""] == {"a cat", "tax law"}
    config = json.loads(out.read_text())["config"]
    assert config["steps"] == [3] and config["published_instructions"]["toy-sts"] is None
    assert config["published_instructions"]["SciFact"] == {"instruction": claim, "doc_instruction": ""}
    kept = runner.invoke(app, [*args[:-1], str(tmp_path / "kept.json"), "--task-instructions"])
    assert kept.exit_code == 0, kept.output
    assert "published_instructions" not in json.loads((tmp_path / "kept.json").read_text())["config"]
