"""Where centers come from before they are computed: the file stored with a model, the bounded
in-memory cache and the bounded disk cache."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import genembed
from genembed.encoders import EmbedSettings, center_files, centering
from genembed.encoders.centering import calibration_texts, center_cache, instruction_center
from genembed.model import GenerativeEmbedder

TEXTS = ["The quick brown fox.", "A man is playing a guitar.", "Paris is the capital of France."]
CLASSIFY = "Classify the emotion expressed in the given text."


@pytest.fixture
def calibration_encodes(monkeypatch):
    """How many times the calibration texts were encoded (each is one center computed)."""
    calls = []
    real = centering.encode_texts

    def counting(backbone, texts, *args, **kwargs):
        assert list(texts) == list(calibration_texts())
        calls.append(kwargs.get("instruction"))
        return real(backbone, texts, *args, **kwargs)

    monkeypatch.setattr(centering, "encode_texts", counting)
    return calls


@pytest.fixture
def disk_cache(tmp_path, monkeypatch):
    folder = tmp_path / "center-cache"
    monkeypatch.setenv(center_files.CACHE_ENV, str(folder))
    return folder


def _centering(backbone) -> GenerativeEmbedder:
    model = GenerativeEmbedder(backbone, center=True, steps=3)
    model.prompts["classification"] = CLASSIFY
    return model


def _fresh_center(backbone, options: EmbedSettings, instruction: str) -> torch.Tensor:
    from genembed.encoders import encode_texts

    raw, _ = encode_texts(backbone, list(calibration_texts()), options, instruction=instruction)
    return torch.nn.functional.normalize(raw, dim=-1).mean(dim=0)


def test_saved_centers_are_used_on_first_use(tiny, tmp_path, monkeypatch, disk_cache, calibration_encodes):
    model = _centering(tiny)
    folder = model.save(tmp_path / "saved")
    named = [instruction for instruction in model.prompts.values() if instruction is not None]
    assert CLASSIFY in named and sorted(calibration_encodes) == sorted(named)  # the named ones
    monkeypatch.setenv(center_files.CACHE_ENV, "off")  # nothing but the stored file can spare the encodes
    calibration_encodes.clear()
    loaded = genembed.load(folder)
    assert len(center_cache(loaded.backbone).stored) == len(named)
    query = loaded.encode_query(TEXTS)
    classified = loaded.encode(TEXTS, prompt_name="classification")
    assert calibration_encodes == []
    # the stored centers are the ones computed afresh, so the vectors are the same
    options = loaded.embed_settings()
    for got, instruction in ((query, model.prompts["query"]), (classified, CLASSIFY)):
        raw = loaded.encode(TEXTS, instruction=instruction, center=False)
        expected = torch.nn.functional.normalize(
            torch.nn.functional.normalize(torch.from_numpy(raw), dim=-1) - _fresh_center(tiny, options, instruction),
            dim=-1,
        )
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-6)
    # a setting that changes embeddings (steps) or a new instruction misses the stored centers
    loaded.encode_query(TEXTS, steps=2)
    loaded.encode(TEXTS, instruction="Another task.")
    assert calibration_encodes == [model.prompts["query"], "Another task."]
    # the batch size does not change embeddings, so it hits them
    loaded.encode(TEXTS, prompt_name="classification", batch_size=1)
    assert len(calibration_encodes) == 2


def test_stored_centers_belong_to_the_saved_weights_and_calibration_texts(tiny, tmp_path, caplog):
    model = _centering(tiny)
    folder = model.save(tmp_path / "saved")
    named = {instruction for instruction in model.prompts.values() if instruction is not None}
    assert len(center_cache(genembed.load(folder, adapter=False).backbone).stored) == len(named)  # same weights
    path = folder / center_files.CENTERS_FILE
    center_files.write_centers(path, {"x": torch.zeros(3)}, "another digest")
    assert center_cache(genembed.load(folder).backbone).stored == {}
    assert "other calibration texts" in caplog.text
    path.write_bytes(b"not safetensors")
    with pytest.raises(center_files.DamagedFileError, match="centers.safetensors.*Delete it"):
        genembed.load(folder)


def test_a_model_without_centering_saves_no_centers(tiny, tmp_path, calibration_encodes):
    folder = GenerativeEmbedder(tiny).save(tmp_path / "saved")
    assert not (folder / center_files.CENTERS_FILE).exists() and calibration_encodes == []


def test_the_memory_cache_keeps_at_most_its_size(tiny, disk_cache, calibration_encodes):
    model = _centering(tiny)
    cache = center_cache(tiny)
    cache.max_size = 2
    for i in range(5):
        model.encode(TEXTS[:1], instruction=f"Task {i}.")
        assert len(cache) <= 2
    assert len(cache) == 2 and cache.computed == 5
    options = model.embed_settings()
    assert cache.get(centering.center_key(options, "Task 4.")) is not None  # the latest stay
    assert cache.get(centering.center_key(options, "Task 0.")) is None
    cache.max_size = 1  # shrinking drops the oldest at once
    assert len(cache) == 1
    with pytest.raises(ValueError, match="center cache size"):
        cache.max_size = -1


def test_the_disk_cache_survives_a_new_model_object(tiny, disk_cache, calibration_encodes):
    options = EmbedSettings.build(steps=2)
    first = instruction_center(tiny, options, CLASSIFY)
    assert calibration_encodes == [CLASSIFY] and len(list(disk_cache.glob("*.safetensors"))) == 1
    again = copy.deepcopy(tiny)  # a new model object with the same weights: read from disk
    torch.testing.assert_close(instruction_center(again, options, CLASSIFY), first, rtol=0, atol=0)
    assert len(calibration_encodes) == 1 and center_cache(again).computed == 0
    other = copy.deepcopy(tiny)  # other weights: another entry
    with torch.no_grad():
        next(other.model.parameters()).add_(0.01)
    instruction_center(other, options, CLASSIFY)
    assert len(calibration_encodes) == 2 and len(list(disk_cache.glob("*.safetensors"))) == 2


def test_the_disk_cache_is_bounded_and_can_be_turned_off(tiny, disk_cache, monkeypatch, calibration_encodes):
    monkeypatch.setattr(center_files, "CACHE_FILES", 2)
    options = EmbedSettings.build(steps=1)
    for i in range(4):
        instruction_center(tiny, options, f"Task {i}.")
    assert len(list(disk_cache.glob("*.safetensors"))) == 2
    damaged = sorted(disk_cache.glob("*.safetensors"))[0]
    damaged.write_bytes(b"garbage")  # a damaged entry is dropped and computed again
    centering.clear_centers(tiny)
    for i in (2, 3):
        instruction_center(tiny, options, f"Task {i}.")
    assert len(calibration_encodes) == 5 and len(list(disk_cache.glob("*.safetensors"))) == 2
    monkeypatch.setenv(center_files.CACHE_ENV, "off")
    centering.clear_centers(tiny)
    instruction_center(tiny, options, "Task 9.")
    assert len(list(disk_cache.glob("*.safetensors"))) == 2 and center_files.cache_folder() is None


@pytest.mark.slow
def test_the_shipped_centers_are_the_computed_ones(monkeypatch, calibration_encodes):
    from genembed.serve.instructions import named_instructions

    monkeypatch.setenv(center_files.CACHE_ENV, "off")
    model = genembed.load(dtype="float32", device="cpu")
    stored = center_cache(model.backbone).stored
    options = model.embed_settings()
    instructions = list(named_instructions(model).values())
    assert sorted(stored) == sorted(centering.center_key(options, i) for i in instructions)
    model.encode(TEXTS, prompt_name="query")
    assert calibration_encodes == []
    got = stored[centering.center_key(options, "Classify the given text.")]
    fresh = _fresh_center(model.backbone, options, "Classify the given text.")
    torch.testing.assert_close(got, fresh, atol=1e-5, rtol=0)
