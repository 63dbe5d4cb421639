from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import genembed
from genembed.cli.app import app
from genembed.training import ConfigError, train
from genembed.training.export import export_checkpoint

TEXTS = ["A man is playing a guitar.", "Paris is the capital of France."]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_folder, run_config):
    out = tmp_path_factory.mktemp("export") / "run"
    train(run_config(out, tiny_folder, train={"max_steps": 4, "save_every": 2, "keep_checkpoints": 3}))
    return out


def test_the_last_checkpoint_exports_the_adapter_the_run_wrote(run, tmp_path):
    folder = export_checkpoint(run, tmp_path / "last")
    final, exported = (load_file(p / "adapter_model.safetensors") for p in (run, folder))
    assert final.keys() == exported.keys() and len(final) > 0
    assert all(np.array_equal(final[k].numpy(), exported[k].numpy()) for k in final)
    assert (folder / "genembed_train.yaml").read_text() == (run / "genembed_train.yaml").read_text()
    assert json.loads((folder / "exported_from.json").read_text())["step"] == 4


def test_an_earlier_checkpoint_loads_and_embeds_differently(run, tmp_path, tiny_folder):
    early = genembed.load(tiny_folder, adapter=export_checkpoint(run, tmp_path / "s2", step=2))
    final = genembed.load(tiny_folder, adapter=run)
    last = genembed.load(tiny_folder, adapter=export_checkpoint(run, tmp_path / "s4", step=4))
    np.testing.assert_array_equal(last.encode(TEXTS, steps=3), final.encode(TEXTS, steps=3))
    assert not np.allclose(early.encode(TEXTS, steps=3), final.encode(TEXTS, steps=3), atol=1e-4)


def test_bfloat16_storage_halves_the_weights_and_embeds_as_the_float32_export(run, tmp_path, tiny_folder):
    full, half = export_checkpoint(run, tmp_path / "f32"), export_checkpoint(run, tmp_path / "bf16", dtype="bfloat16")
    weights = {name: load_file(folder / "adapter_model.safetensors") for name, folder in (("f", full), ("h", half))}
    assert weights["f"].keys() == weights["h"].keys()
    for key, tensor in weights["f"].items():
        assert weights["h"][key].dtype == torch.bfloat16
        assert torch.equal(weights["h"][key], tensor.to(torch.bfloat16))
    size = {name: (folder / "adapter_model.safetensors").stat().st_size for name, folder in (("f", full), ("h", half))}
    assert size["h"] < 0.6 * size["f"]
    a = genembed.load(tiny_folder, adapter=full, dtype="float32").encode(TEXTS, steps=3)
    b = genembed.load(tiny_folder, adapter=half, dtype="float32").encode(TEXTS, steps=3)
    assert not np.array_equal(a, b)  # the rounding reaches the embeddings ...
    np.testing.assert_allclose(np.sum(a * b, axis=1), 1.0, atol=1e-3)  # ... and leaves them where they were


def test_bad_requests_name_what_is_wrong(run, tmp_path):
    with pytest.raises(ConfigError, match=r"no checkpoint for step 3 .*step-0000002, step-0000004"):
        export_checkpoint(run, tmp_path / "x", step=3)
    with pytest.raises(ConfigError, match="not a training run folder"):
        export_checkpoint(tmp_path, tmp_path / "x")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        export_checkpoint(run, tmp_path / "taken")
    with pytest.raises(ConfigError, match="dtype must be one of float32, bfloat16, float16, got 'int8'"):
        export_checkpoint(run, tmp_path / "y", dtype="int8")


def test_cli_exports_and_reports_errors(run, tmp_path):
    ok = CliRunner().invoke(app, ["export-checkpoint", str(run), "--out", str(tmp_path / "a"), "--step", "2"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "a" / "adapter_model.safetensors").is_file()
    bad = CliRunner().invoke(app, ["export-checkpoint", str(run), "--out", str(tmp_path / "b"), "--step", "9"])
    assert bad.exit_code == 2 and "no checkpoint for step 9" in bad.output
    half = CliRunner().invoke(
        app, ["export-checkpoint", str(run), "--out", str(tmp_path / "c"), "--save-dtype", "bfloat16"]
    )
    assert half.exit_code == 0, half.output
    assert {t.dtype for t in load_file(tmp_path / "c" / "adapter_model.safetensors").values()} == {torch.bfloat16}
