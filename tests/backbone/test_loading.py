from __future__ import annotations

import copy
import os

import pytest
import torch

import genembed
from genembed.backbone import MissingModelError, atomic_directory, load_backbone, resolve_dtype


def test_missing_local_path_says_what_and_how(tmp_path):
    with pytest.raises(MissingModelError, match="does not exist"):
        load_backbone(str(tmp_path / "nope" / "model"))


def test_missing_gguf_file(tmp_path):
    with pytest.raises(MissingModelError, match="GGUF file not found"):
        load_backbone(tmp_path / "model.gguf")


def test_folder_without_config(tmp_path):
    with pytest.raises(MissingModelError, match="no config.json: not a HF model folder"):
        load_backbone(tmp_path)


def test_a_lora_folder_given_as_the_model_points_to_adapter(tmp_path, tiny):
    from peft import LoraConfig, get_peft_model

    import genembed

    get_peft_model(tiny.model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "lora")
    with pytest.raises(MissingModelError) as caught:
        genembed.load(tmp_path / "lora")
    message = str(caught.value)
    assert "holds a LoRA adapter (adapter_config.json)" in message
    assert f"genembed.load(adapter={str(tmp_path / 'lora')!r})" in message and "--adapter" in message


def test_uncached_hub_id_fails_fast_with_instructions(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # (tests/backbone/test_hub.py covers the download path)
    with pytest.raises(MissingModelError, match="hf download some-org/some-model"):
        load_backbone("some-org/some-model")


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype must be .auto. or one of"):
        resolve_dtype("float8")
    assert resolve_dtype("bf16") is torch.bfloat16


def test_missing_adapter_folder(tmp_path, tiny, monkeypatch):
    from genembed.models.assemble import attach_adapter

    with pytest.raises(MissingModelError, match="adapter_config.json"):
        attach_adapter(tiny, tmp_path)


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "half.bin").write_bytes(b"x")
        raise RuntimeError("crash mid-write")
    assert not target.exists()
    assert os.listdir(tmp_path) == []
    with atomic_directory(target) as tmp:
        (tmp / "whole.bin").write_bytes(b"x")
    assert (target / "whole.bin").read_bytes() == b"x"


def test_hf_folder_round_trip(tmp_path, tiny):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    model = genembed.load(tmp_path)
    before = genembed.GenerativeEmbedder(tiny).encode(["a round trip"], steps=2)
    after = model.encode(["a round trip"], steps=2)
    assert abs(float((before * after).sum()) - 1.0) < 1e-5


def test_the_shipped_adapter_is_the_default_of_the_default_model_only(tmp_path, tiny, monkeypatch):
    from peft import LoraConfig, get_peft_model

    import genembed.models.adapters as adapters
    import genembed.models.load as loading
    from genembed.cli._common import load_model

    folder, adapter = tmp_path / "tiny", tmp_path / "shipped"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    lora = get_peft_model(copy.deepcopy(tiny.model), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    generator = torch.Generator().manual_seed(0)  # not the global RNG: the earlier tests must not decide the adapter
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_" in name:  # A and B (peft draws A from the global RNG)
                p.copy_(torch.randn(p.shape, generator=generator) * (0.5 if "lora_B" in name else 0.2))
    lora.save_pretrained(adapter)
    real = loading.load_backbone
    monkeypatch.setattr(loading, "load_backbone", lambda model, **kw: real(model or folder, **kw))  # tiny as default
    monkeypatch.setattr(adapters, "default_adapter", lambda: adapter)

    default, raw, other = genembed.load(), genembed.load(adapter=False), genembed.load(folder)
    assert (default.adapter, raw.adapter, other.adapter) == ("shipped", None, None)
    assert load_model(None, "none").adapter is None and load_model(None, None).adapter == "shipped"
    emb = {m.name: m.encode(["the default adapter"], steps=2) for m in (default, raw, other)}
    assert emb["tiny"] is not None and len(emb) == 2  # raw and other are the same model: the same name
    assert float((emb[default.name] * emb["tiny"]).sum()) < 0.999  # the adapter changes the embedding


def test_the_shipped_adapter_is_in_the_package_and_small():
    from genembed.models.adapters import DEFAULT_ADAPTER, default_adapter

    assert default_adapter() == DEFAULT_ADAPTER, "src/genembed/adapters/ holds no default adapter"
    size = sum(f.stat().st_size for f in DEFAULT_ADAPTER.iterdir())
    assert size < 25e6, f"the shipped adapter takes {size / 1e6:.1f} MB"


@pytest.mark.slow
def test_default_model_loads_from_converted_cache(real_model):
    config = real_model.backbone.model.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.vocab_size) == (
        "llama",
        30,
        576,
        49152,
    )
    assert real_model.dim == 576
    assert os.path.isfile(os.path.join(real_model.backbone.path, "model.safetensors"))
    assert "quantization_config" not in config.to_dict()


def test_auto_dtype_is_bfloat16_only_where_the_hardware_computes_it(monkeypatch, tiny, tmp_path):
    from genembed.backbone import default_dtype, resolve_dtype

    monkeypatch.delenv("GENEMBED_DTYPE", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert default_dtype("cpu") == "bfloat16" and resolve_dtype("auto") is torch.bfloat16
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    assert default_dtype("cpu") == "float32" and resolve_dtype("auto", "cpu") is torch.float32
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert default_dtype("cpu") == "bfloat16"
    monkeypatch.setenv("GENEMBED_DTYPE", "fp32")  # the override wins
    assert default_dtype("cpu") == "float32"
    # genembed.load() follows the choice
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    monkeypatch.setenv("GENEMBED_DTYPE", "bfloat16")
    assert genembed.load(tmp_path).backbone.model.dtype == torch.bfloat16
    assert genembed.load(tmp_path, dtype="float32").backbone.model.dtype == torch.float32
    with pytest.raises(ValueError, match="dtype must be 'auto' or one of"):
        resolve_dtype("int8")


@pytest.mark.parametrize(
    ("file", "how", "match"),
    [
        ("adapter_model.safetensors", "truncate", "not a readable safetensors file"),
        ("adapter_model.safetensors", "header", "not a readable safetensors file"),
        ("adapter_model.safetensors", "delete", "is missing"),
        ("adapter_config.json", "truncate", "is not valid JSON"),
    ],
)
def test_a_damaged_adapter_names_its_file(tmp_path, tiny, file, how, match):
    from peft import LoraConfig, get_peft_model

    from genembed._files import DamagedFileError
    from genembed.models.assemble import attach_adapter
    from genembed.training.lora import continue_lora

    adapter = tmp_path / "adapter"
    lora = get_peft_model(copy.deepcopy(tiny.model), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    lora.save_pretrained(adapter)
    attach_adapter(copy.deepcopy(tiny), adapter)  # the intact adapter loads
    path = adapter / file
    if how == "truncate":
        path.write_bytes(path.read_bytes()[:-20])
    elif how == "header":
        data = bytearray(path.read_bytes())
        data[10] = 0xFF  # invalid UTF-8 inside the JSON header
        path.write_bytes(bytes(data))
    else:
        path.unlink()
    for load in (lambda: attach_adapter(tiny, adapter), lambda: continue_lora(tiny.model, adapter)):
        with pytest.raises(DamagedFileError, match=match) as caught:
            load()
        assert str(path) in str(caught.value) and f"Copy the adapter folder {adapter} again" in str(caught.value)
