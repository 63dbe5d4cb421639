from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from genembed.training.distributed import gather_with_grad, rank_and_world

WORKER = Path(__file__).with_name("ddp_worker.py")
ACCELERATE = Path(sys.executable).with_name("accelerate")


def test_gather_without_a_process_group_is_the_identity():
    x = torch.randn(3, 2, requires_grad=True)
    assert rank_and_world() == (0, 1)
    assert gather_with_grad(x) is x


def _write_config(path: Path, model: Path, assets: Path, out: Path, batch_size: int, loss: dict) -> Path:
    config = {
        "model": {"name": str(model)},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "embedding": {"steps": 2, "query_max_length": 48, "doc_max_length": 48},
        "loss": {"temperature": 0.05, "cross_device_negatives": True, **loss},
        "data": {"files": [str(assets / "similar.jsonl")], "batch_size": batch_size, "hard_negatives": 1},
        "train": {"output_dir": str(out), "max_steps": 3, "lr": 5e-3, "seed": 0, "save_every": 0, "progress": False},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path):
    """What ddp_worker.py wrote: ``{"world": int, "weights": {name: tensor}}``."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as handle:
        world = int(handle.metadata()["world"])
    return {"world": world, "weights": load_file(str(path))}


@pytest.mark.integration
@pytest.mark.parametrize("distill", [False, True])
def test_two_processes_train_identical_weights_equal_to_one_process_on_the_global_batch(
    tmp_path, tiny_folder, assets, tiny_teacher, distill
):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # with distillation, every process scores the global batch with the teacher (the KL uses gathered embeddings)
    loss = {"distill_weight": 2.0, "distill_teacher": str(tiny_teacher)} if distill else {}
    two = _write_config(tmp_path / "two.yaml", tiny_folder, assets, tmp_path / "two", batch_size=3, loss=loss)
    one = _write_config(tmp_path / "one.yaml", tiny_folder, assets, tmp_path / "one", batch_size=6, loss=loss)
    launch = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port())]
    done = subprocess.run([*launch, str(WORKER), str(two)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, str(WORKER), str(one)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]

    ranks = [_read(tmp_path / "two" / f"rank{r}.safetensors") for r in (0, 1)]
    single = _read(tmp_path / "one" / "rank0.safetensors")
    assert [r["world"] for r in ranks] == [2, 2] and single["world"] == 1
    assert ranks[0]["weights"].keys() == single["weights"].keys()
    differing, total = 0, 0
    for name, weight in ranks[0]["weights"].items():
        assert torch.equal(weight, ranks[1]["weights"][name]), name  # data parallel keeps ranks in sync
        assert weight.abs().sum() > 0, name
        differing += int(((weight - single["weights"][name]).abs() > 1e-5).sum())
        total += weight.numel()
    # cross-device negatives make 2 x 3 queries train like one process with 6 queries: same losses and
    # gradient norms at every step (the norm at step 1 checks the gradient scaling), and the same weights
    # except where Adam's first steps amplify float noise in near-zero gradients
    two_metrics = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    one_metrics = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert len(two_metrics) == 3
    for a, b in zip(two_metrics, one_metrics, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["distill"] == pytest.approx(b["distill"], rel=1e-5) and (a["distill"] > 0) == distill
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    assert differing / total < 0.01, (differing, total)
    assert (tmp_path / "two" / "adapter_model.safetensors").is_file()
