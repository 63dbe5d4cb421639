"""Hub ids: the HF cache first, downloads only when allowed, clear errors offline; never the network here."""

from __future__ import annotations

import json
import time

import pytest

import genembed
from genembed.backbone import MissingModelError
from genembed.backbone import hub as hub_module
from genembed.backbone.hub import downloads_allowed, hub_snapshot, looks_like_path


@pytest.fixture
def no_network(monkeypatch):
    """Fail the test on any attempt to reach the hub (a download or a metadata call)."""
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise AssertionError(f"the network was called: {args} {kwargs}")

    real = huggingface_hub.snapshot_download

    def snapshot_download(*args, **kwargs):
        if not kwargs.get("local_files_only"):
            refuse(*args, **kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", refuse)


def test_a_cached_model_loads_offline_without_the_network(fake_hub, tiny_folder, no_network):
    snapshot = fake_hub("some-org/tiny", tiny_folder)
    assert hub_snapshot("some-org/tiny") == snapshot
    model = genembed.load("some-org/tiny")
    assert model.backbone.name == "some-org/tiny" and model.backbone.source == "some-org/tiny"
    assert model.adapter is None and model.center is False


@pytest.mark.parametrize("how", ["env", "argument"])
def test_offline_and_missing_fails_fast_naming_the_model_and_the_fix(fake_hub, monkeypatch, no_network, how):
    if how == "argument":
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    kwargs = {"local_files_only": True} if how == "argument" else {}
    start = time.perf_counter()
    with pytest.raises(MissingModelError) as caught:
        genembed.load("GritLM/GritLM-7B", **kwargs)
    assert time.perf_counter() - start < 5
    message = str(caught.value)
    assert "'GritLM/GritLM-7B'" in message and "`hf download GritLM/GritLM-7B`" in message
    assert ("HF_HUB_OFFLINE" if how == "env" else "local_files_only=True") in message


def test_a_missing_local_path_says_so_without_a_download_hint(tmp_path, no_network):
    for path in (tmp_path / "nope" / "model", "./not-here/model", "~/no/such/model"):
        with pytest.raises(MissingModelError) as caught:
            genembed.load(str(path))
        assert "does not exist" in str(caught.value) and "hf download" not in str(caught.value)


def test_a_two_part_name_under_an_existing_folder_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert looks_like_path("runs/model") and not looks_like_path("GritLM/GritLM-7B")
    assert looks_like_path("a/b/c") and looks_like_path("/abs") and not looks_like_path("gpt2")


def test_online_a_missing_model_is_downloaded_into_the_cache(fake_hub, tiny_folder, monkeypatch, tmp_path):
    """The download path, with huggingface_hub's two calls replaced: it asks for the repo's files, skips
    duplicate weight formats, and the model loads from the snapshot the download made."""
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert downloads_allowed() and not downloads_allowed(local_files_only=True)
    calls = []

    class Sibling:
        def __init__(self, name, size):
            self.rfilename, self.size = name, size

    class Info:
        siblings = [Sibling("model.safetensors", 1000), Sibling("pytorch_model.bin", 1000), Sibling("config.json", 1)]

    def model_info(self, repo_id, files_metadata=False):
        calls.append(("info", repo_id))
        return Info()

    real = huggingface_hub.snapshot_download

    def snapshot_download(repo_id, **kwargs):
        if kwargs.get("local_files_only"):
            return real(repo_id, **kwargs)
        calls.append(("download", repo_id, kwargs["ignore_patterns"], str(kwargs["cache_dir"])))
        return str(fake_hub(repo_id, tiny_folder))

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model = genembed.load("new-org/tiny")
    assert calls[0] == ("info", "new-org/tiny")
    _, repo, skipped, cache = calls[1]
    assert (repo, cache) == ("new-org/tiny", str(hub_module.hub_cache_dir()))
    assert "*.bin" in skipped and "*.safetensors" not in skipped
    assert model.backbone.name == "new-org/tiny"
    assert len(calls) == 2  # the second lookup (load_backbone) finds the snapshot in the cache


def test_an_incomplete_snapshot_is_not_used(fake_hub, tiny_folder, no_network):
    def half(snapshot):  # an interrupted download: the index names a shard that never arrived
        (snapshot / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "part-2.safetensors"}}))

    fake_hub("some-org/half", tiny_folder, edit=half)
    with pytest.raises(MissingModelError, match="is only partly in the local Hugging Face cache"):
        hub_snapshot("some-org/half")


def test_download_errors_become_missing_model_errors(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")

    def gated(self, repo_id, **kwargs):
        raise GatedRepoError.__new__(GatedRepoError)  # what the hub raises for a gated repo (its HTTP details aside)

    def unreachable(self, repo_id, **kwargs):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    with pytest.raises(
        MissingModelError, match="Could not download 'org/model'.*name resolution.*hf download org/model"
    ):
        hub_snapshot("org/model")
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", gated)
    with pytest.raises(MissingModelError, match="is gated: accept its terms at https://huggingface.co/org/model"):
        hub_snapshot("org/model")


def test_the_bundled_default_never_asks_the_hub(tiny_folder, monkeypatch):
    """``genembed.load()`` goes straight to the bundled GGUF (here the tiny folder stands in for it): not
    even a cache lookup goes through huggingface_hub."""
    import huggingface_hub

    import genembed.models.load as loading

    def refuse(*args, **kwargs):
        raise AssertionError(f"the hub was asked: {args} {kwargs}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # even with downloads allowed
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", refuse)
    real = loading.load_backbone
    seen = []

    def bundled(model, **kwargs):
        seen.append(model)
        return real(tiny_folder, **kwargs)

    monkeypatch.setattr(loading, "load_backbone", bundled)
    assert genembed.load(adapter=False).adapter is None and seen == [None]
