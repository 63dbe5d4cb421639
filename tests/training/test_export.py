from __future__ import annotations

import json

import numpy as np
import pytest
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


def test_bad_requests_name_what_is_wrong(run, tmp_path):
    with pytest.raises(ConfigError, match=r"no checkpoint for step 3 .*step-0000002, step-0000004"):
        export_checkpoint(run, tmp_path / "x", step=3)
    with pytest.raises(ConfigError, match="not a training run folder"):
        export_checkpoint(tmp_path, tmp_path / "x")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        export_checkpoint(run, tmp_path / "taken")


def test_cli_exports_and_reports_errors(run, tmp_path):
    ok = CliRunner().invoke(app, ["export-checkpoint", str(run), "--out", str(tmp_path / "a"), "--step", "2"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "a" / "adapter_model.safetensors").is_file()
    bad = CliRunner().invoke(app, ["export-checkpoint", str(run), "--out", str(tmp_path / "b"), "--step", "9"])
    assert bad.exit_code == 2 and "no checkpoint for step 9" in bad.output
