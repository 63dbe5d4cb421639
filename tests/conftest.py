"""Shared fixtures: a tiny random Llama built once per session (each test gets a deep copy) and,
for tests marked ``slow``, the real default model."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# genembed.load() defaults to bfloat16 on CPUs that compute it natively; the tests compare against
# float32 references with tight tolerances, so they load float32 unless a test asks otherwise
# (tests/backbone/test_loading.py checks the automatic choice itself). Subprocesses inherit it.
os.environ["GENEMBED_DTYPE"] = "float32"
# Tests never touch the network: huggingface_hub (and genembed's downloads, genembed.backbone.hub) stay
# offline; a test of the download path turns it back on and replaces huggingface_hub's calls.
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_test_process():
    # Tests run on shared 2-core machines; tiny models are fastest single-threaded.
    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _center_cache(tmp_path_factory):
    # centers the tests compute are cached in a folder of the session, not the user's cache
    os.environ["GENEMBED_CENTER_CACHE"] = str(tmp_path_factory.mktemp("center-cache"))


@pytest.fixture(scope="session")
def _tiny_backbone():
    from genembed.backbone import tiny_backbone

    return tiny_backbone(seed=0)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory, _tiny_backbone) -> Path:
    """The session's tiny model written as an HF folder (so ``genembed.load`` and the CLI read it back)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    _tiny_backbone.model.save_pretrained(folder)
    _tiny_backbone.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny(_tiny_backbone):
    """A fresh copy of the tiny backbone (tests may modify it)."""
    return copy.deepcopy(_tiny_backbone)


@pytest.fixture
def tiny_model(tiny):
    from genembed.model import GenerativeEmbedder

    return GenerativeEmbedder(tiny)


@pytest.fixture(scope="session")
def real_model():
    """The bundled backbone (SmolLM2-135M-Instruct) without an adapter, loaded once; do not modify it."""
    import genembed

    return genembed.load(adapter=False)


@pytest.fixture(scope="session")
def default_model():
    """What ``genembed.load()`` gives: the bundled backbone plus the shipped GIRCSE adapter."""
    import genembed
    from genembed.models.adapters import default_adapter

    if default_adapter() is None:
        pytest.fail("this checkout ships no default adapter (src/genembed/adapters/)")
    return genembed.load()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = SHARED / "data"
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A Hugging Face hub cache in a temporary folder (``HF_HUB_CACHE``), offline (``HF_HUB_OFFLINE=1``):
    ``fake_hub(repo_id, folder, edit=None)`` copies ``folder`` in as the snapshot of ``repo_id``
    (``models--org--name/{refs/main, snapshots/<rev>/}``, as ``hf download`` lays it out); ``edit(snapshot)``
    may change the copy. Returns the snapshot folder."""
    import hashlib
    import shutil

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def add(repo_id: str, folder: Path, edit=None) -> Path:
        revision = hashlib.sha1(repo_id.encode()).hexdigest()
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / revision
        shutil.copytree(folder, snapshot)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
        if edit is not None:
            edit(snapshot)
        return snapshot

    return add


def rebase_adapter(base_id: str):
    """An ``edit`` for :func:`fake_hub`: the copied adapter names its base ``base_id``, as a published one does."""
    import json

    def edit(snapshot: Path) -> None:
        config = json.loads((snapshot / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = base_id
        (snapshot / "adapter_config.json").write_text(json.dumps(config))

    return edit


@pytest.fixture
def published_gircse(fake_hub) -> Path:
    """``Roytsai27/GIRCSE-Mistral7B`` in the fake hub cache: the tiny Mistral LoRA adapter of the GIRCSE
    reference (golden.json), on ``mistralai/Mistral-7B-v0.1`` = the tiny Mistral. Returns the reference folder."""
    reference = SHARED / "reference" / "gircse"
    if not (reference / "golden.json").is_file():
        pytest.skip(f"the GIRCSE reference is not at {reference}")
    fake_hub("mistralai/Mistral-7B-v0.1", reference / "tiny-mistral")
    fake_hub(
        "Roytsai27/GIRCSE-Mistral7B", reference / "tiny-mistral-lora", edit=rebase_adapter("mistralai/Mistral-7B-v0.1")
    )
    return reference


@pytest.fixture(scope="session")
def grit_folders(tmp_path_factory, _tiny_backbone) -> dict[str, Path]:
    """Tiny random Mistral and Mixtral folders (GritLM-7B's and GritLM-8x7B's architectures) for the GRIT
    parity and path tests: the tiny tokenizer, which here adds a BOS as Mistral's does, untied
    embeddings, a peaked LM head (std 0.8) so that greedy continuations depend on the prompt, q/k at
    std 0.1 so that attention is far from uniform (causal and bidirectional passes then differ), and a
    router at std 0.5 so that Mixtral's experts are chosen per token."""
    from tokenizers import processors
    from transformers import (
        MistralConfig,
        MistralForCausalLM,
        MixtralConfig,
        MixtralForCausalLM,
        PreTrainedTokenizerFast,
    )

    source = _tiny_backbone.tokenizer
    raw = copy.deepcopy(source.backend_tokenizer)
    bos = (source.bos_token, source.bos_token_id)
    raw.post_processor = processors.TemplateProcessing(single=f"{bos[0]} $A", special_tokens=[bos])
    specials = {"bos_token": bos[0], "eos_token": source.eos_token, "pad_token": source.pad_token}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token=source.unk_token, **specials)
    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    sizes |= {"num_key_value_heads": 2, "vocab_size": len(tokenizer), "max_position_embeddings": 512}
    sizes |= {"tie_word_embeddings": False, "bos_token_id": bos[1], "eos_token_id": tokenizer.eos_token_id}
    stds = {"lm_head": 0.8, "q_proj": 0.1, "k_proj": 0.1, "embed_tokens": 0.02, "mlp.gate.": 0.5}
    builds = {
        "mistral": lambda: MistralForCausalLM(MistralConfig(**sizes)),
        "mixtral": lambda: MixtralForCausalLM(MixtralConfig(**sizes, num_local_experts=4, num_experts_per_tok=2)),
    }
    folders = {}
    for seed, (name, build) in enumerate(builds.items()):
        model, gen = build(), torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param_name, param in sorted(model.named_parameters()):
                if param.ndim >= 2:  # norms stay 1
                    std = next((v for key, v in stds.items() if key in param_name), 0.03)
                    param.copy_(torch.randn(param.shape, generator=gen) * std)
        folders[name] = tmp_path_factory.mktemp(f"grit-{name}")
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


@pytest.fixture(scope="session")
def grit_model(grit_folders):
    """``grit_model(kind)``: a new model on a tiny GRIT folder (``"mistral"`` or ``"mixtral"``), loaded in
    float32 and set to embed and chat as the published GritLM models do (``method="grit"``,
    ``prompt_format="gritlm"``)."""
    import genembed

    def load(kind: str = "mistral"):
        model = genembed.load(grit_folders[kind], dtype="float32", device="cpu")
        model.method, model.prompt_format = "grit", "gritlm"
        return model

    return load
