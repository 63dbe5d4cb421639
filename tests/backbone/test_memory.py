"""Large models: the CPU memory check, device_map over several GPUs, bitsandbytes, bf16 on CUDA
(device capabilities and memory are patched: this machine has one small CPU)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import genembed
from genembed.backbone import memory
from genembed.backbone.memory import (
    InsufficientMemoryError,
    check_fits_in_memory,
    choose_device_map,
    count_parameters,
    quantization_config,
)


def test_parameters_are_counted_from_the_safetensors_headers(tiny, tiny_folder):
    assert count_parameters(tiny_folder) == sum(p.numel() for p in tiny.model.parameters())


def test_a_cpu_load_that_will_not_fit_stops_before_loading_with_the_estimate(tiny_folder, monkeypatch):
    import transformers

    params = count_parameters(tiny_folder)
    monkeypatch.setattr(memory, "available_memory", lambda: params * 3)  # < 4 bytes per parameter (float32)
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("loaded anyway")
    )
    with pytest.raises(InsufficientMemoryError) as caught:
        genembed.load(tiny_folder, dtype="float32", device="cpu")
    message = str(caught.value)
    assert f"{params * 4 / 1e9:.1f} GB" in message and "x 4 bytes in float32" in message
    assert "available" in message and "GENEMBED_SKIP_MEMORY_CHECK=1" in message
    check_fits_in_memory(tiny_folder, "bfloat16", "tiny")  # 2 bytes per parameter fit
    monkeypatch.setenv("GENEMBED_SKIP_MEMORY_CHECK", "1")
    check_fits_in_memory(tiny_folder, "float32", "tiny")


def test_the_cli_reports_it_without_a_traceback(tiny_folder, monkeypatch):
    from genembed.cli.app import app

    monkeypatch.setattr(memory, "available_memory", lambda: 1000)
    result = CliRunner().invoke(app, ["inspect", "x", "--model", str(tiny_folder), "--device", "cpu"])
    assert result.exit_code == 2 and "needs about" in result.output and "Traceback" not in result.output


def _gpus(monkeypatch, count: int, free: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=0: (free, 2 * free))
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def test_device_auto_spreads_a_model_over_several_gpus_only_when_one_is_too_small(monkeypatch):
    _gpus(monkeypatch, count=2, free=80 * 10**9)
    assert choose_device_map("auto", None, 93e9) == "auto"  # GritLM-8x7B in bf16 on two 80 GB GPUs
    assert choose_device_map("auto", None, 14.5e9) is None  # a 7B model fits on the first
    assert choose_device_map("cuda:1", None, 93e9) is None  # an explicit device is not second-guessed
    assert choose_device_map("cpu", {"": "cpu"}, 93e9) == {"": "cpu"}  # the caller's map wins
    monkeypatch.setenv("LOCAL_RANK", "0")  # one process per GPU under a launcher: never spread
    assert choose_device_map("auto", None, 93e9) is None
    _gpus(monkeypatch, count=1, free=80 * 10**9)
    assert choose_device_map("auto", None, 93e9) is None


def test_a_device_map_reaches_from_pretrained(tiny_folder, monkeypatch):
    import transformers

    seen = {}
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(folder, **kwargs):
        seen.update(kwargs)
        return real(folder, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    model = genembed.load(tiny_folder, device="cpu", device_map={"": "cpu"})
    assert seen["device_map"] == {"": "cpu"} and model.device.type == "cpu"
    assert model.encode("placed by accelerate").shape == (model.dim,)


def test_quantization_needs_a_gpu_and_bitsandbytes(monkeypatch, tiny_folder):
    import importlib.util

    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        genembed.load(tiny_folder, device="cpu", quantization="4bit")
    with pytest.raises(ValueError, match="quantization must be one of"):
        quantization_config("3bit", "cuda:0", torch.bfloat16)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name))
    with pytest.raises(ImportError, match=r'pip install "genembed\[quant\]"'):
        quantization_config("8bit", "cuda:0", torch.bfloat16)


def test_auto_dtype_is_bfloat16_on_a_cuda_gpu_that_computes_it(monkeypatch):
    from genembed.backbone import default_dtype

    monkeypatch.delenv("GENEMBED_DTYPE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert default_dtype("cuda:0") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # a GPU without bf16
    assert default_dtype("cuda:0") == "float32"
