from __future__ import annotations

import pytest
import torch

from genembed.backbone.device import resolve_device


def _available(monkeypatch, *, cuda: bool, mps: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(True, True, "cuda:0"), (True, False, "cuda:0"), (False, True, "mps"), (False, False, "cpu")],
)
def test_auto_prefers_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    _available(monkeypatch, cuda=cuda, mps=mps)
    assert resolve_device("auto") == expected
    assert resolve_device(None) == expected


def test_auto_uses_the_local_rank_under_a_launcher(monkeypatch):
    _available(monkeypatch, cuda=True, mps=False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("auto") == "cuda:3"


def test_explicit_devices_pass_through_checked(monkeypatch):
    _available(monkeypatch, cuda=False, mps=False)
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("cuda:1") == "cuda:1"  # explicit: not second-guessed
    assert resolve_device(torch.device("cpu")) == "cpu"
    with pytest.raises(ValueError, match="device must be 'auto' or a torch device"):
        resolve_device("gpu0")


def test_load_resolves_auto_before_loading(monkeypatch, tmp_path, tiny):
    """``genembed.load`` hands "auto" down; ``load_backbone`` resolves it (and, with several GPUs, may
    spread the model: genembed.backbone.memory.choose_device_map) before anything is loaded."""
    import genembed
    from genembed.backbone import loading as backbone_loading

    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    seen = []

    def resolve(device):
        seen.append((device, resolve_device(device)))
        return "cpu"  # this machine cannot run on MPS; what matters is what "auto" resolved to

    _available(monkeypatch, cuda=False, mps=True)
    monkeypatch.setattr(backbone_loading, "resolve_device", resolve)
    model = genembed.load(tmp_path)
    assert seen == [("auto", "mps")] and model.device.type == "cpu"
    _available(monkeypatch, cuda=False, mps=False)
    assert genembed.load(tmp_path).device.type == "cpu" and seen[-1] == ("auto", "cpu")
