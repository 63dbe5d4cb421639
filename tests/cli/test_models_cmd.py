"""``genembed models`` and the CLI's handling of published ids offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from genembed.cli.app import app
from genembed.models.published import PUBLISHED

runner = CliRunner()


def test_models_lists_the_published_checkpoints_and_the_default(fake_hub, tiny_folder):
    fake_hub("GritLM/GritLM-7B", tiny_folder)
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    for model_id in PUBLISHED:
        assert model_id in result.output
    assert "(default)" in result.output and "14.5 GB" in result.output  # GritLM-7B in bf16
    rows = {row["id"]: row for row in json.loads(runner.invoke(app, ["models", "--json"]).output)}
    assert rows["GritLM/GritLM-7B"]["cached"] == "yes" and rows["GritLM/GritLM-8x7B"]["cached"] == "no"
    assert (
        rows["Roytsai27/GIRCSE-QWEN7B"]["steps"] == 3 and rows["Roytsai27/GIRCSE-QWEN7B"]["base"] == "Qwen/Qwen2.5-7B"
    )
    assert rows["GritLM/GritLM-8x7B"]["weights_gb"]["bfloat16"] == 93.4
    (default,) = [row for model_id, row in rows.items() if model_id.endswith("(default)")]
    assert default["dim"] == 576 and default["params"] > 1e8  # read from the bundled GGUF file


@pytest.mark.parametrize("model_id", ["GritLM/GritLM-7B", "Qwen/Qwen3-Embedding-0.6B"])
def test_an_uncached_published_model_offline_is_a_clean_fast_cli_error(tmp_path, model_id):
    """The issue's check, as a user runs it: a fresh process, an empty cache, HF_HUB_OFFLINE=1."""
    env = {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    env |= {key: value for key, value in os.environ.items() if key in ("PYTHONPATH", "HOME")}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "genembed.cli.app", "inspect", "a text", "--model", model_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 2, done.stderr
    assert model_id in done.stderr and f"hf download {model_id}" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert seconds < 30, f"took {seconds:.1f}s"


@pytest.mark.parametrize("family", ["Qwen3-Embedding", "gte-Qwen2-instruct", "e5-mistral", "LLM2Vec"])
def test_every_family_offline_fails_at_once_naming_the_id_and_hf_download(tmp_path, monkeypatch, family):
    """Each family's hub ids, with an empty cache and HF_HUB_OFFLINE=1: a MissingModelError in under 5 s."""
    import genembed
    from genembed.backbone.default_model import MissingModelError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ids = [model_id for model_id, entry in PUBLISHED.items() if entry.family == family]
    assert ids
    for model_id in ids:
        start = time.perf_counter()
        with pytest.raises(MissingModelError) as error:
            genembed.load(model_id)
        assert time.perf_counter() - start < 5.0
        assert model_id in str(error.value) and f"hf download {model_id}" in str(error.value)
