"""Every command that loads a model takes ``--device`` and loads the model there (here: the CPU)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import genembed
from genembed.cli.app import app

runner = CliRunner()


@pytest.fixture
def devices(monkeypatch):
    """The device of every genembed.load call the commands make."""
    seen: list[str] = []
    real = genembed.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(genembed, "load", spy)
    return seen


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _run(args):
    result = runner.invoke(app, [*args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return result


def test_every_model_command_takes_device_cpu(tmp_path, tiny_folder, devices, monkeypatch):
    import genembed.serve

    model = ["--model", str(tiny_folder)]
    docs = _jsonl(tmp_path / "docs.jsonl", [{"id": i, "text": f"document number {i} about cats"} for i in range(4)])
    task = tmp_path / "tasks" / "toy-sts"
    task.mkdir(parents=True)
    (task / "task.json").write_text(
        json.dumps(
            {"name": "toy-sts", "type": "sts", "metric": "spearman", "source": "t", "license": "t", "instruction": ""}
        )
    )
    _jsonl(task / "pairs.jsonl", [{"s1": f"a {i} b", "s2": f"a {i} c", "score": i % 5} for i in range(6)])
    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"query": f"q{i}", "pos": [f"p{i}"]} for i in range(3)])
    monkeypatch.setattr(genembed.serve, "run_server", lambda *a, **k: None)  # build the app, do not serve it

    commands = [
        ["demo", *model, "--steps", "1", "--top", "1"],
        ["inspect", "hello", *model, "--steps", "2"],
        ["encode", str(docs), "--out", str(tmp_path / "emb"), *model, "--steps", "1", "--quiet"],
        ["chat", "--prompt", "hi", "--max-new-tokens", "2", *model],
        ["serve", *model],
        ["eval", str(task), *model, "--steps", "1", "--no-cache", "--out", str(tmp_path / "res.json")],
        ["index", "build", str(docs), "--out", str(tmp_path / "idx"), *model, "--steps", "1"],
        ["index", "add", str(tmp_path / "idx"), str(_jsonl(tmp_path / "more.jsonl", [{"id": 9, "text": "dogs"}]))],
        ["ask", str(tmp_path / "idx"), "what about cats?", "--max-new-tokens", "2", "--top", "1", *model],
        [
            "make-gen-data",
            str(docs),
            "--out",
            str(tmp_path / "gen.jsonl"),
            "--limit",
            "1",
            "--max-new-tokens",
            "2",
            *model,
        ],
        ["mine-negatives", str(pairs), "--out", str(tmp_path / "mined.jsonl"), "--steps", "1", "--quiet", *model],
    ]
    for args in commands:
        _run(args)
    assert devices == ["cpu"] * len(commands)


def test_a_bad_device_is_a_clean_error(tiny_folder):
    result = runner.invoke(app, ["inspect", "x", "--model", str(tiny_folder), "--device", "warp-drive"])
    assert result.exit_code == 2
    assert "device must be 'auto' or a torch device" in result.output and "Traceback" not in result.output
