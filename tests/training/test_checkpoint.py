"""Training checkpoints: safetensors + JSON (no pickle), exact round trips, old and damaged ones refused."""

from __future__ import annotations

import json
import pickle
import random
import shutil

import numpy as np
import pytest
import torch
import yaml

from genembed._files import DamagedFileError
from genembed.training import ConfigError, train
from genembed.training.checkpoint import (
    capture_rng,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)


def _optimizer_after_a_step():
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    optimizer = torch.optim.AdamW(params, lr=1e-3, betas=(0.8, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    sum(p.square().sum() for p in params).backward()
    optimizer.step()
    scheduler.step()
    return params, optimizer, scheduler


def test_state_round_trips_exactly_without_pickle(tmp_path):
    params, optimizer, scheduler = _optimizer_after_a_step()
    random.random(), np.random.rand(), torch.rand(1)  # move every generator off its seed
    state = {
        "weights": {"a.weight": params[0].detach().clone(), "b.bias": params[1].detach().to(torch.bfloat16)},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": [capture_rng()],
    }
    path = save_checkpoint(tmp_path, 7, state, keep=2)
    assert path.name == "step-0000007"
    assert sorted(p.name for p in path.iterdir()) == ["state.json", "tensors.safetensors"]
    loaded = load_checkpoint(path)

    assert loaded["step"] == 7
    assert set(loaded["weights"]) == {"a.weight", "b.bias"}
    assert torch.equal(loaded["weights"]["a.weight"], state["weights"]["a.weight"])
    assert loaded["weights"]["b.bias"].dtype == torch.bfloat16
    assert loaded["scheduler"] == state["scheduler"]
    saved_opt, original = loaded["optimizer"], optimizer.state_dict()
    assert saved_opt["param_groups"] == original["param_groups"]  # betas stay a tuple
    assert sorted(saved_opt["state"]) == [0, 1]  # integer parameter ids stay integers
    for pid, entry in original["state"].items():
        for key, value in entry.items():
            assert torch.equal(saved_opt["state"][pid][key], value), (pid, key)
    fresh = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone()) for p in params], lr=1.0)
    fresh.load_state_dict(saved_opt)  # what the training loop does

    expected = (random.random(), np.random.rand(), torch.rand(1))
    restore_rng(loaded["rng"][0])
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected


def test_keep_prunes_old_checkpoints_and_latest_is_the_newest(tmp_path):
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, {"x": torch.ones(2) * step}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000004", "step-0000006"]
    assert latest_checkpoint(tmp_path).name == "step-0000006"
    assert torch.equal(load_checkpoint(tmp_path / "step-0000006")["x"], torch.full((2,), 6.0))


class _Payload:
    """Unpickling this would create a file: proof that an old checkpoint is never unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_an_old_pickled_checkpoint_is_refused_before_the_model_loads(tmp_path, run_config):
    marker = tmp_path / "unpickled"
    old = tmp_path / "run" / "checkpoints" / "step-0000004"
    old.mkdir(parents=True)
    (old / "state.pt").write_bytes(pickle.dumps({"step": 4, "payload": _Payload(marker)}))
    with pytest.raises(ConfigError, match=r"checkpoint .*step-0000004 was written by an older genembed as a pickle"):
        load_checkpoint(old)
    # through train(): refused before the (missing) model would be loaded, the folder untouched
    cfg = run_config(tmp_path / "run", tmp_path / "no-such-model")
    with pytest.raises(ConfigError, match=r"step-0000004 .* does not load .* Delete that checkpoint folder"):
        train(cfg, resume=True)
    assert not marker.exists()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoints"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_folder, run_config):
    """A real run folder: 2 steps of the tiny model with a checkpoint at each."""
    out = tmp_path_factory.mktemp("ckpt") / "run"
    train(run_config(out, tiny_folder, train={"max_steps": 2, "save_every": 1}))
    return out


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "state"])
def test_a_damaged_checkpoint_names_its_file(trained_run, tmp_path, tiny_folder, run_config, damage):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    saved = yaml.safe_load((run / "genembed_train.yaml").read_text())
    saved["train"]["output_dir"] = str(run)  # the copy is the same run in another folder
    (run / "genembed_train.yaml").write_text(yaml.safe_dump(saved))
    folder = run / "checkpoints" / "step-0000002"
    tensors, state = folder / "tensors.safetensors", folder / "state.json"
    if damage == "truncate":
        tensors.write_bytes(tensors.read_bytes()[:-100])
        broken, match = tensors, "has .* bytes, .* were written"
    elif damage == "flip":
        data = bytearray(tensors.read_bytes())
        data[-50] ^= 0xFF
        tensors.write_bytes(bytes(data))
        broken, match = tensors, "does not match its checksum"
    elif damage == "delete":
        tensors.unlink()
        broken, match = tensors, "is missing"
    else:
        state.write_text(state.read_text()[:200])
        broken, match = state, "is not valid JSON"
    with pytest.raises(DamagedFileError, match=match) as caught:
        train(run_config(run, tiny_folder, train={"max_steps": 3, "save_every": 1}), resume=True)
    assert str(broken) in str(caught.value)
    assert f"Delete the folder {folder} and rerun with --resume" in str(caught.value)
    # doing what the message says continues from the checkpoint before it
    shutil.rmtree(folder)
    result = train(run_config(run, tiny_folder, train={"max_steps": 3, "save_every": 1}), resume=True)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert result.steps == 3 and steps == [1, 2, 3]


def test_a_damaged_saved_config_names_itself(trained_run, tmp_path, tiny_folder, run_config):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "genembed_train.yaml").write_text("train: [unclosed\n")
    cfg = run_config(run, tiny_folder, train={"max_steps": 3, "save_every": 1})
    with pytest.raises(ConfigError, match=rf"(?s){run / 'genembed_train.yaml'} is damaged .* Delete it and rerun"):
        train(cfg, resume=True)
    (run / "genembed_train.yaml").unlink()
    assert train(cfg, resume=True).steps == 3
    assert yaml.safe_load((run / "genembed_train.yaml").read_text())["train"]["output_dir"] == str(run)
