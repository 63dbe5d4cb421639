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
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "backbone", "centers.safetensors", "genembed.json"]
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
        "max_length": 512,
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


def test_a_saved_model_takes_another_adapter_in_place_of_its_own(tmp_path, tiny):
    import copy

    other = _lora(copy.deepcopy(tiny), seed=2)
    other.model.save_pretrained(tmp_path / "other-lora")
    want = GenerativeEmbedder(other, adapter="other-lora").encode(TEXTS)
    folder = GenerativeEmbedder(_lora(tiny), adapter="my-lora").save(tmp_path / "saved")
    loaded = genembed.load(folder, adapter=tmp_path / "other-lora")
    assert loaded.adapter == "other-lora"
    np.testing.assert_allclose(loaded.encode(TEXTS), want, atol=1e-5)


def test_a_local_backbone_is_copied_or_referenced_relative_to_the_folder(tmp_path, tiny):
    tiny.model.save_pretrained(tmp_path / "base")
    tiny.tokenizer.save_pretrained(tmp_path / "base")
    model = genembed.load(tmp_path / "base")
    _lora(model.backbone)
    model.adapter = "my-lora"
    # by default a backbone loaded from a local folder travels with the save: the folder is portable
    folder = model.save(tmp_path / "saved")
    assert json.loads((folder / "genembed.json").read_text())["backbone"]["source"] == "backbone/"
    _same_model(model, genembed.load(folder))
    # save_backbone=False references it by a path relative to the saved folder, never an absolute one
    folder = model.save(tmp_path / "models" / "saved", save_backbone=False)
    assert "backbone" not in {p.name for p in folder.iterdir()}
    settings = json.loads((folder / "genembed.json").read_text())
    assert settings["backbone"]["source"] == "../../base"
    shutil.move(tmp_path, tmp_path.parent / (tmp_path.name + "-moved"))  # both folders move together
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    _same_model(model, genembed.load(moved / "models" / "saved"))
    # the referenced backbone gone: a clear error naming the settings file
    shutil.rmtree(moved / "base")
    with pytest.raises(MissingModelError, match=r"genembed.json: backbone.source .* save_backbone=True"):
        genembed.load(moved / "models" / "saved")


def _text_files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.suffix in (".json", ".md", ".yaml")
    }


def test_saved_files_hold_no_machine_path_and_saving_warns_nothing(tmp_path, tiny, recwarn):
    import warnings

    tiny.model.save_pretrained(tmp_path / "base")
    tiny.tokenizer.save_pretrained(tmp_path / "base")
    model = genembed.load(tmp_path / "base")
    _lora(model.backbone)
    model.adapter = "my-lora"
    warnings.simplefilter("always")
    recwarn.clear()
    folder = model.save(tmp_path / "saved", save_backbone=False)
    assert [str(w.message) for w in recwarn] == []  # no hub lookup by peft, no other warning
    files = _text_files(folder)
    assert {"README.md", "adapter_config.json", "genembed.json"} <= set(files)
    for name, text in files.items():
        assert str(tmp_path) not in text and str(Path.home()) not in text, name
    assert json.loads(files["adapter_config.json"])["base_model_name_or_path"] == "base"  # by name
    # the in-memory adapter keeps where it came from
    assert model.backbone.model.peft_config["default"].base_model_name_or_path == str(tmp_path / "base")


def test_the_model_card_says_what_the_model_is_and_how_it_was_trained(tmp_path, tiny):
    import yaml

    adapter_dir = tmp_path / "runs" / "stage2"
    model = _customised(GenerativeEmbedder(_lora(tiny), adapter="stage2"))
    model.method, model.steps = "mean", 4
    model.backbone.model.save_pretrained(adapter_dir)
    config = {
        "embedding": {"method": "mean", "attention": "causal", "steps": 4},
        "loss": {"temperature": 0.02},
        "data": {"files": [{"path": str(tmp_path / "data" / "snli.jsonl")}, {"path": "../data/wikiqa.jsonl"}]},
        "train": {"max_steps": 150, "lr": 1e-4, "schedule": "cosine", "precision": "bf16", "seed": 7},
        "lora": {"enabled": True, "r": 4, "alpha": 16.0, "target_modules": "all-linear", "init_from": None},
        "generative": {"files": [], "weight": 1.0},
    }
    (adapter_dir / "genembed_train.yaml").write_text(yaml.safe_dump(config))
    model.adapter_path = str(adapter_dir)
    folder = model.save(tmp_path / "my-embedder", scores={"toy-sts": 71.234, "toy-cls": 55.0})
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: genembed\n") and "- mean" in card
    assert "# my-embedder" in card and 'genembed.load("my-embedder")' in card
    assert "the decoder LLM `tiny-llama-0` with the LoRA adapter `stage2`" in card
    for row in ("| method | mean |", "| soft tokens K (steps) | 4 |", "| tau | 0.7 |", "| similarity | dot |"):
        assert row in card, row
    assert '- `query`: "Find the topic."' in card and '- `classification`: "Classify the text." (the default)' in card
    assert "method `mean` with causal attention, K=4, loss temperature 0.02" in card
    assert "Data: snli.jsonl, wikiqa.jsonl" in card and "150 steps, learning rate 0.0001 (cosine)" in card
    assert "| toy-sts | 71.23 |" in card and "| toy-cls | 55.00 |" in card
    saved_config = yaml.safe_load((folder / "genembed_train.yaml").read_text())
    assert saved_config["data"]["files"][0]["path"] == "snli.jsonl"  # no absolute path of this machine
    assert saved_config["data"]["files"][1]["path"] == "../data/wikiqa.jsonl"
    loaded = genembed.load(folder)
    assert loaded.trained_for.method == "mean"  # the training config travels with the adapter
    # saved again from the loaded copy: the same card
    assert (
        loaded.save(tmp_path / "again" / "my-embedder", scores={"toy-sts": 71.234, "toy-cls": 55.0}) / "README.md"
    ).read_text() == card


def test_save_replaces_an_earlier_save_atomically_and_protects_other_folders(tmp_path, tiny, monkeypatch):
    from genembed.models import save as saving

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
    with pytest.raises(
        MissingModelError, match="not in the local Hugging Face cache.*hf download genembed-test/not-there"
    ):
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
    # the same up to rounding: a fresh process computes the instruction prefix anew, this one reuses its cache
    np.testing.assert_allclose(np.load(out), cached_repo.encode_query(TEXTS), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_default_model_round_trip(default_model, tmp_path):
    folder = default_model.save(tmp_path / "default")
    settings = json.loads((folder / "genembed.json").read_text())
    assert settings["backbone"]["source"] == "bundled" and settings["encode"]["center"] is True
    assert "backbone" not in {p.name for p in folder.iterdir()}  # the bundled backbone is referenced
    loaded = genembed.load(folder)
    assert loaded.name == default_model.name and loaded.center and loaded.generation_adapter == "adapter"
    for encode in ("encode_query", "encode_document"):
        np.testing.assert_allclose(getattr(loaded, encode)(TEXTS), getattr(default_model, encode)(TEXTS), atol=1e-6)
