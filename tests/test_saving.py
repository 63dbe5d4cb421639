"""``model.save(folder)`` and ``genembed.load(folder)``: same embeddings, same settings; HF cache layout by id."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import genembed
from genembed.backbone import MissingModelError
from genembed.model import GenerativeEmbedder

TEXTS = ["the cat sat on the mat", "stock markets fell sharply", "a kitten naps on a rug"]
REPO = Path(__file__).resolve().parents[1]


def _lora(backbone, seed: int = 1):
    """Wrap the backbone's model with a LoRA adapter whose B matrices are random (so it changes embeddings)."""
    from genembed.training.lora import add_lora

    backbone.model = add_lora(backbone.model, r=4).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in backbone.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return backbone


def _customised(model: GenerativeEmbedder) -> GenerativeEmbedder:
    model.steps, model.tau, model.center = 3, 0.7, True
    model.prompts["query"] = "Find the topic."
    model.prompts["classification"] = "Classify the text."
    model.default_prompt_name = "classification"
    model.similarity_fn_name = "dot"
    return model


def _same_model(a: GenerativeEmbedder, b: GenerativeEmbedder) -> None:
    for key in ("method", "steps", "attention", "prompt_format", "tau", "center", "truncate_dim", "prompts"):
        assert getattr(a, key) == getattr(b, key), key
    assert (a.default_prompt_name, a.similarity_fn_name, a.name) == (
        b.default_prompt_name,
        b.similarity_fn_name,
        b.name,
    )
    for encode in ("encode", "encode_query", "encode_document"):
        np.testing.assert_array_equal(getattr(a, encode)(TEXTS), getattr(b, encode)(TEXTS))


def test_in_memory_model_saves_weights_and_settings(tmp_path, tiny):
    model = _customised(GenerativeEmbedder(tiny))
    folder = model.save(tmp_path / "saved")
    assert sorted(p.name for p in folder.iterdir()) == ["backbone", "centres.safetensors", "genembed.json"]
    settings = json.loads((folder / "genembed.json").read_text())
    assert settings["backbone"] == {"name": "tiny-llama-0", "source": "backbone/"}
    assert settings["encode"] == {
        "method": "gircse",
        "steps": 3,
        "attention": None,
        "prompt_format": None,
        "tau": 0.7,
        "center": True,
        "truncate_dim": None,
    }
    assert settings["prompts"]["query"] == "Find the topic." and settings["default_prompt_name"] == "classification"
    assert len(settings["calibration_sha256"]) == 64
    loaded = genembed.load(folder)
    _same_model(model, loaded)
    # load() arguments override the saved settings
    assert genembed.load(folder, tau=0.5, center=False).tau == 0.5


def test_adapter_on_an_in_memory_backbone_saves_base_and_adapter(tmp_path, tiny):
    base = GenerativeEmbedder(tiny).encode(TEXTS)
    model = GenerativeEmbedder(_lora(tiny), adapter="my-lora")
    assert not np.allclose(model.encode(TEXTS), base, atol=1e-3)  # the adapter does change embeddings
    folder = model.save(tmp_path / "saved")
    assert {"adapter_config.json", "adapter_model.safetensors", "backbone", "genembed.json"} <= {
        p.name for p in folder.iterdir()
    }
    assert not any("lora" in p.name for p in (folder / "backbone").iterdir())
    loaded = genembed.load(folder)
    assert loaded.name == "tiny-llama-0+my-lora"
    _same_model(model, loaded)
    np.testing.assert_allclose(genembed.load(folder, adapter=False).encode(TEXTS), base, atol=1e-6)


def test_a_backbone_with_a_source_is_referenced_not_copied(tmp_path, tiny):
    tiny.model.save_pretrained(tmp_path / "base")
    tiny.tokenizer.save_pretrained(tmp_path / "base")
    model = genembed.load(tmp_path / "base")
    _lora(model.backbone)
    model.adapter = "my-lora"
    folder = model.save(tmp_path / "saved")
    assert "backbone" not in {p.name for p in folder.iterdir()}
    settings = json.loads((folder / "genembed.json").read_text())
    assert settings["backbone"]["source"] == str((tmp_path / "base").resolve())
    _same_model(model, genembed.load(folder))
    # the referenced backbone gone: a clear error naming the settings file
    shutil.rmtree(tmp_path / "base")
    with pytest.raises(MissingModelError, match=r"genembed.json: backbone.source .* save_backbone=True"):
        genembed.load(folder)


def test_save_replaces_an_earlier_save_atomically_and_protects_other_folders(tmp_path, tiny, monkeypatch):
    from genembed import saving

    model = GenerativeEmbedder(tiny)
    folder = model.save(tmp_path / "saved")
    model.steps = 2
    model.save(folder)
    assert genembed.load(folder).steps == 2
    model.steps = 4

    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(saving, "_save_base_weights", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        model.save(folder)
    assert genembed.load(folder).steps == 2  # the earlier save is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]  # no temporary folders left behind
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an earlier genembed save"):
        model.save(other)


def test_malformed_settings_name_the_field(tmp_path, tiny):
    folder = GenerativeEmbedder(tiny).save(tmp_path / "saved")
    path = folder / "genembed.json"
    settings = json.loads(path.read_text())
    path.write_text("{not json")
    with pytest.raises(ValueError, match="genembed.json: not valid JSON"):
        genembed.load(folder)
    path.write_text(json.dumps({**settings, "encode": {k: v for k, v in settings["encode"].items() if k != "tau"}}))
    with pytest.raises(ValueError, match=r"field encode.tau is missing"):
        genembed.load(folder)
    path.write_text(json.dumps({**settings, "encode": {**settings["encode"], "method": "magic"}}))
    with pytest.raises(ValueError, match=r"genembed.json: method must be one of"):
        genembed.load(folder)
    path.write_text(json.dumps({**settings, "prompts": {"query": 3}}))
    with pytest.raises(ValueError, match=r"genembed.json: prompts\['query'\]"):
        genembed.load(folder)


def _into_hf_cache(folder: Path, hub: Path, repo_id: str) -> None:
    """Lay ``folder`` out as huggingface_hub's cache holds a downloaded repo (blobs + snapshot + ref)."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    for file in folder.rglob("*"):
        if file.is_file():
            blob = repo / "blobs" / f"{abs(hash(str(file))):x}"
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, blob)
            link = snapshot / file.relative_to(folder)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)


@pytest.fixture
def cached_repo(tmp_path, tiny, monkeypatch):
    """A saved tiny model (with an adapter) in a fresh HF cache as ``genembed-test/tiny-saved``."""
    from huggingface_hub import constants

    model = _customised(GenerativeEmbedder(_lora(tiny), adapter="tiny-lora"))
    _into_hf_cache(model.save(tmp_path / "saved"), tmp_path / "hf" / "hub", "genembed-test/tiny-saved")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))  # read at import time
    return model


def test_a_saved_model_in_the_hf_cache_loads_by_repo_id(cached_repo):
    loaded = genembed.load("genembed-test/tiny-saved")
    _same_model(cached_repo, loaded)
    with pytest.raises(MissingModelError, match="not a local folder, .gguf file or cached hub id"):
        genembed.load("genembed-test/not-there")


@pytest.mark.integration
def test_cli_loads_a_cached_repo_id_from_a_fresh_process(cached_repo, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "q.npy"
    code = (
        "import genembed, numpy; m = genembed.load('genembed-test/tiny-saved', device='cpu');"
        f"print(m.steps, m.prompts['query']); numpy.save(r'{out}', m.encode_query({TEXTS!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "3 Find the topic."
    np.testing.assert_array_equal(np.load(out), cached_repo.encode_query(TEXTS))


@pytest.mark.slow
def test_default_model_round_trip(default_model, tmp_path):
    folder = default_model.save(tmp_path / "default")
    settings = json.loads((folder / "genembed.json").read_text())
    assert settings["backbone"]["source"] == "bundled" and settings["encode"]["center"] is True
    assert "backbone" not in {p.name for p in folder.iterdir()}  # the bundled backbone is referenced
    loaded = genembed.load(folder)
    assert loaded.name == default_model.name and loaded.center and not loaded.generation_adapter
    for encode in ("encode_query", "encode_document"):
        np.testing.assert_allclose(getattr(loaded, encode)(TEXTS), getattr(default_model, encode)(TEXTS), atol=1e-6)
