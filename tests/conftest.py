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


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_test_process():
    # Tests run on shared 2-core machines; tiny models are fastest single-threaded.
    torch.set_num_threads(1)


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
    from genembed.loading import default_adapter

    if default_adapter() is None:
        pytest.fail("this checkout ships no default adapter (src/genembed/adapters/)")
    return genembed.load()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = SHARED / "data"
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path


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
