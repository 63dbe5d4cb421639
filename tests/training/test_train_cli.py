from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from genembed.cli.app import app

runner = CliRunner()


def _config(tmp_path, tiny_folder, assets, **train):
    cfg = {
        "model": {"name": str(tiny_folder)},
        "lora": {"r": 4, "alpha": 8},
        "embedding": {"steps": 2, "query_max_length": 48, "doc_max_length": 48},
        "data": {"files": [str(assets / "similar.jsonl")], "batch_size": 4},
        "train": {"output_dir": str(tmp_path / "run"), "max_steps": 3, "progress": False, **train},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_train_with_overrides_and_resume(tmp_path, tiny_folder, assets):
    path = _config(tmp_path, tiny_folder, assets)
    result = runner.invoke(app, ["train", str(path), "train.max_steps=2", "embedding.steps=3", "train.save_every=1"])
    assert result.exit_code == 0, result.output
    assert "trained 2 steps" in result.output
    saved = yaml.safe_load((tmp_path / "run" / "genembed_train.yaml").read_text())
    assert saved["embedding"]["steps"] == 3 and saved["train"]["max_steps"] == 2
    result = runner.invoke(app, ["train", str(path), "embedding.steps=3", "--resume"])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]


def test_bad_override_and_bad_data_are_clean_errors(tmp_path, tiny_folder, assets):
    path = _config(tmp_path, tiny_folder, assets)
    result = runner.invoke(app, ["train", str(path), "train.lrr=1"])
    assert result.exit_code == 2 and "unknown key 'train.lrr'" in result.output and "Traceback" not in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "pos": ["p"]}\n{"query": "q", "pos": ["p"], "neg": "n"}\n')
    result = runner.invoke(app, ["train", str(path), f"data.files=[{bad}]"])
    assert result.exit_code == 2
    assert f"{bad}:2: field 'neg' must be a list of strings" in result.output.replace("\n", "")


def test_make_gen_data_writes_generative_jsonl(tmp_path, tiny_folder, assets):
    out = tmp_path / "gen.jsonl"
    args = ["make-gen-data", str(assets / "qa_pairs.jsonl"), "--out", str(out), "--model", str(tiny_folder)]
    result = runner.invoke(app, [*args, "--limit", "3", "--max-new-tokens", "4", "--temperature", "1.0"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 and all(set(r) == {"prompt", "response"} for r in rows)


def test_make_gen_data_rag_writes_questions_with_passages(tmp_path, tiny_folder, assets):
    out = tmp_path / "rag.jsonl"
    args = ["make-gen-data", str(assets / "qa_pairs.jsonl"), "--rag", "--top", "2", "--out", str(out)]
    result = runner.invoke(
        app, [*args, "--model", str(tiny_folder), "--limit", "2", "--max-new-tokens", "3", "-t", "1"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and all(
        set(r) == {"passages", "question", "response"} and len(r["passages"]) == 2 for r in rows
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q"}\n')
    result = runner.invoke(app, ["make-gen-data", str(bad), "--rag", "--out", str(out), "--model", str(tiny_folder)])
    assert (
        result.exit_code == 2
        and f"{bad}:1: field 'pos' must be a non-empty list of strings" in result.output.replace("\n", "")
    )
