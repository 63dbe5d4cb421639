"""What an adapter was trained for (its saved training config) and the warning for other methods."""

from __future__ import annotations

import warnings

import pytest
import yaml

import genembed
from genembed.models.adapters import DEFAULT_ADAPTER
from genembed.models.trained_for import TrainedFor, UntrainedAdapterWarning, read_trained_for

TEXTS = ["A man is playing a guitar.", "Paris is the capital of France."]


def _config(folder, name="genembed_train.yaml", **sections):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(yaml.safe_dump(sections))
    return folder


def test_read_trained_for_from_small_saved_configs(tmp_path):
    gircse = _config(tmp_path / "gircse", embedding={"method": "gircse", "attention": "causal"}, generative={})
    assert read_trained_for(gircse) == TrainedFor("gircse", "causal", False, str(gircse / "genembed_train.yaml"))
    joint = _config(
        tmp_path / "joint",
        "training_config.yaml",
        embedding={"method": "grit"},
        generative={"files": ["chat.jsonl"], "weight": 1.0},
    )
    assert read_trained_for(joint) == TrainedFor("grit", "bidirectional", True, str(joint / "training_config.yaml"))
    off = _config(tmp_path / "off", embedding={"method": "mean"}, generative={"files": ["chat.jsonl"], "weight": 0})
    assert read_trained_for(off).generation is False and read_trained_for(off).attention == "causal"
    assert read_trained_for(tmp_path / "none") is None  # no saved config: unknown
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "genembed_train.yaml").write_text("- a list\n")
    with pytest.raises(ValueError, match=r"bad/genembed_train.yaml: expected a YAML mapping"):
        read_trained_for(tmp_path / "bad")


def test_the_shipped_adapter_was_trained_for_gircse_and_generation_and_answers_to_its_former_names():
    from genembed.models.adapters import (
        SHIPPED_ADAPTERS,
        current_name,
        resolve_adapter,
        shipped_adapter,
        shipped_folders,
    )

    trained = read_trained_for(DEFAULT_ADAPTER)
    assert (trained.method, trained.attention, trained.generation) == ("gircse", "causal", True)
    assert trained.encode_problem("gircse", "causal") is None
    assert DEFAULT_ADAPTER.name == "smollm2-135m-joint"  # the joint (GRIT + GIRCSE) adapter, named for it
    names = {"joint", "gircse", "smollm2-135m-joint", "smollm2-135m-gircse"}
    assert set(SHIPPED_ADAPTERS) == names and shipped_folders() == [DEFAULT_ADAPTER]
    for name in names:
        assert shipped_adapter(name) == resolve_adapter(name) == DEFAULT_ADAPTER, name
    # what was recorded under the former folder name (an index's model, its KV states' adapter) is today's
    assert current_name("SmolLM2-135M-Instruct+smollm2-135m-gircse") == "SmolLM2-135M-Instruct+smollm2-135m-joint"
    assert current_name("smollm2-135m-gircse@sha256:955aa9ff") == "smollm2-135m-joint@sha256:955aa9ff"
    assert current_name("tiny+my-lora") == "tiny+my-lora" and current_name("none") == "none"
    assert "trained for method='gircse' with causal attention only" in trained.encode_problem("grit", "bidirectional")


@pytest.fixture
def adapter_dirs(tmp_path, _tiny_backbone):
    """A tiny model folder and a LoRA adapter for it, saved with a GIRCSE-only training config."""
    import copy

    from peft import LoraConfig, get_peft_model

    model_dir = tmp_path / "tiny"
    _tiny_backbone.model.save_pretrained(model_dir)
    _tiny_backbone.tokenizer.save_pretrained(model_dir)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(copy.deepcopy(_tiny_backbone.model), config)
    peft_model.save_pretrained(tmp_path / "adapter")
    _config(tmp_path / "adapter", embedding={"method": "gircse", "attention": "causal"}, generative={"files": []})
    return model_dir, tmp_path / "adapter"


def test_encode_warns_for_a_method_the_adapter_was_not_trained_for(adapter_dirs):
    model_dir, adapter = adapter_dirs
    model = genembed.load(model_dir, adapter=adapter)
    assert model.trained_for.method == "gircse" and model.generation_adapter == "base"
    untrained = r"adapter adapter: .*method='grit' with bidirectional attention is untrained.*Use method='gircse'"
    with pytest.warns(UntrainedAdapterWarning, match=untrained):
        grit = model.encode(TEXTS, method="grit")
    assert grit.shape == (2, model.dim)  # research use stays possible
    with pytest.warns(UntrainedAdapterWarning, match="method='gircse' with bidirectional attention is untrained"):
        model.encode(TEXTS, steps=2, attention="bidirectional")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedAdapterWarning)
        model.encode(TEXTS, steps=2)  # what it was trained for
        genembed.load(model_dir).encode(TEXTS, method="grit")  # no adapter: nothing to warn about


def test_index_build_warns_too(adapter_dirs, tmp_path):
    from genembed.encoders.settings import EmbedSettings
    from genembed.retrieval.index_build import build_index

    model_dir, adapter = adapter_dirs
    docs = tmp_path / "docs.txt"
    docs.write_text("Paris is the capital of France.")
    model = genembed.load(model_dir, adapter=adapter)
    with pytest.warns(UntrainedAdapterWarning, match="method='mean' with causal attention is untrained"):
        build_index(model, [docs], tmp_path / "idx", settings=EmbedSettings(method="mean"), show_progress_bar=False)


def test_a_shipped_adapter_loads_by_name_and_a_local_folder_of_that_name_wins(adapter_dirs, tmp_path, monkeypatch):
    import shutil

    import numpy as np

    import genembed.models.adapters as loading
    from genembed.backbone import MissingModelError

    model_dir, adapter = adapter_dirs
    monkeypatch.setitem(loading.SHIPPED_ADAPTERS, "joint", adapter)
    monkeypatch.chdir(tmp_path)  # no folder called "joint" here
    by_name = genembed.load(model_dir, adapter="joint")
    by_path = genembed.load(model_dir, adapter=adapter, center=True)
    assert by_name.adapter_path == str(adapter.resolve()) and by_name.center is True  # shipped: centered
    np.testing.assert_array_equal(by_name.encode(TEXTS, steps=2), by_path.encode(TEXTS, steps=2))
    assert not np.allclose(by_name.encode(TEXTS, steps=2), genembed.load(model_dir).encode(TEXTS, steps=2))

    shutil.copytree(adapter, tmp_path / "joint")  # a local folder of the same name wins
    (tmp_path / "joint" / "genembed_train.yaml").unlink()
    assert genembed.load(model_dir, adapter="joint").trained_for is None

    monkeypatch.setitem(loading.SHIPPED_ADAPTERS, "gone", tmp_path / "not-shipped")
    with pytest.raises(MissingModelError, match="does not ship the 'gone' adapter"):
        genembed.load(model_dir, adapter="gone")
