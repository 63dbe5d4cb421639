"""The published-models table and ``genembed.load(PUBLISHED_ID)``, on the tiny reference models laid out
as a fake hub cache under the published ids (no network)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import genembed
from genembed.models.published import PUBLISHED, instruction_set, published_model
from tests.conftest import SHARED, rebase_adapter

REFERENCE = SHARED / "reference" / "gircse"


def _golden():
    path = REFERENCE / "golden.json"
    if not path.is_file():
        pytest.skip(f"the GIRCSE reference is not at {REFERENCE}")
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_table_holds_the_four_checkpoints_with_their_authors_settings():
    assert {"Roytsai27/GIRCSE-Mistral7B", "Roytsai27/GIRCSE-QWEN7B", "GritLM/GritLM-7B", "GritLM/GritLM-8x7B"} == {
        model_id for model_id, entry in PUBLISHED.items() if entry.family in ("GIRCSE", "GritLM")
    }
    gircse, grit = PUBLISHED["Roytsai27/GIRCSE-QWEN7B"], PUBLISHED["GritLM/GritLM-8x7B"]
    assert (gircse.base, gircse.method, gircse.prompt_format, gircse.steps, gircse.train_steps, gircse.tau) == (
        "Qwen/Qwen2.5-7B",
        "gircse",
        "gircse",
        3,
        5,
        1.0,
    )
    assert (grit.base, grit.method, grit.prompt_format, grit.attention, grit.dtype) == (
        None,
        "grit",
        "gritlm",
        "bidirectional",
        "bfloat16",
    )
    assert published_model("gritlm/gritlm-7b") is PUBLISHED["GritLM/GritLM-7B"]  # hub ids ignore case
    assert published_model("some-org/other") is None and published_model(None) is None
    # bf16 weights of a 7B model: 14.5 GB; the 8x7B needs about 93 GB, 23 GB in 4-bit
    assert PUBLISHED["GritLM/GritLM-7B"].weight_bytes() == 2 * 7_241_732_096
    assert round(grit.weight_bytes("4bit") / 1e9, 1) == 23.4


def test_the_table_holds_the_decoder_embedder_families_as_data():
    """At least four families besides GIRCSE and GritLM, each a row: hub id, size, dimension, max length,
    method (pooling), attention, prompt format, query instruction."""
    families = {entry.family for entry in PUBLISHED.values()} - {"GIRCSE", "GritLM"}
    assert families >= {"Qwen3-Embedding", "gte-Qwen2-instruct", "e5-mistral", "LLM2Vec"}
    qwen = PUBLISHED["Qwen/Qwen3-Embedding-8B"]
    assert (qwen.method, qwen.prompt_format, qwen.attention, qwen.dim, qwen.matryoshka) == (
        "last",
        "qwen3-embedding",
        "causal",
        4096,
        (32, 4096),
    )
    gte7, gte15 = PUBLISHED["Alibaba-NLP/gte-Qwen2-7B-instruct"], PUBLISHED["Alibaba-NLP/gte-Qwen2-1.5B-instruct"]
    assert (gte7.attention, gte15.attention, gte7.prompt_format, gte7.dim, gte15.dim) == (
        "bidirectional",
        "causal",
        "e5",
        3584,
        1536,
    )
    llm2vec = PUBLISHED["McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp-supervised"]
    assert (llm2vec.method, llm2vec.attention, llm2vec.prompt_format, llm2vec.max_length) == (
        "mean",
        "bidirectional",
        "llm2vec",
        512,
    )
    assert llm2vec.prompts()["query"].endswith("the query:") and llm2vec.prompts()["document"] == ""
    # llm2vec's test_configs/mteb/task_to_instructions.json; mteb's LLM2Vec wrapper embeds documents bare
    assert llm2vec.instruction_set().for_task("MSMARCO", "query") == llm2vec.prompts()["query"]
    assert llm2vec.instruction_set().for_task("MSMARCO", "document") == ""
    assert llm2vec.instruction_set().for_task("STS12") == "Retrieve semantically similar text:"
    assert llm2vec.instruction_set().source["commit"] == "312adcfb578b4023bfc9d3bcc83b6b87448ab059"
    e5 = PUBLISHED["intfloat/e5-mistral-7b-instruct"]
    assert (e5.max_length, e5.prompt_format, e5.instruction_set().for_task("MSMARCO")) == (4096, "e5", None)
    assert e5.instruction_set().source["name"] == "none published"


def test_the_authors_instructions_by_task_and_side():
    gircse, grit = instruction_set("gircse"), instruction_set("gritlm")
    assert gircse.source["commit"] == "20676c15294e161bcfd5d5be97e75498e54fdb8f"
    assert grit.source["set"] == "e5" and grit.source["license"] == "Apache-2.0"
    assert gircse.for_task("STSBenchmark") == "Retrieve semantically similar text."
    assert gircse.for_task("STS22.v2") == gircse.for_task("STS22")  # GIRCSE drops ".v2"
    claim = "Given a scientific claim, retrieve documents that support or refute the claim"
    assert grit.for_task("SciFact", "query") == claim and grit.for_task("SciFact", "document") == ""
    assert grit.for_task("SciDocsRR", "document") == grit.for_task("SciDocsRR", "query") != ""
    # gritlm gives every CQADupstack task one instruction; GIRCSE has one per forum
    assert grit.for_task("CQADupstackTexRetrieval", "query") == grit.for_task("CQADupstackRetrieval", "query")
    assert gircse.for_task("CQADupstackTexRetrieval", "query").startswith("Represent the title")
    assert grit.for_task("NoSuchTask") is None
    with pytest.raises(ValueError, match="side must be"):
        grit.for_task("SciFact", "passage")


def test_a_published_adapter_loads_on_the_base_its_config_names_with_the_authors_settings(published_gircse):
    model = genembed.load("Roytsai27/GIRCSE-Mistral7B")
    assert model.backbone.name == "mistralai/Mistral-7B-v0.1" and model.adapter == "Roytsai27/GIRCSE-Mistral7B"
    assert (model.method, model.steps, model.tau, model.prompt_format, model.center) == (
        "gircse",
        3,
        1.0,
        "gircse",
        False,
    )
    assert model.prompts["query"] == PUBLISHED["Roytsai27/GIRCSE-Mistral7B"].query_instruction
    assert model.prompts["document"] == ""
    raw = genembed.load("Roytsai27/GIRCSE-Mistral7B", adapter=False)  # the bare base, same settings
    assert raw.adapter is None and not hasattr(raw.backbone.model, "peft_config")


@pytest.mark.parametrize("key", ["none", "retrieve"])
def test_a_published_adapter_reproduces_the_official_gircse_embeddings(published_gircse, key):
    """The golden adapter cases (official GIRCSE code) through genembed.load(PUBLISHED_ID) alone."""
    golden = _golden()
    case = next(
        c
        for c in golden["models"]["tiny-mistral"]["cases"]
        if c["adapter_folder"] and c["instruction_key"] == key and c["K"] == 5 and c["batch_mode"] == "batch"
    )
    model = genembed.load("Roytsai27/GIRCSE-Mistral7B")
    ours = model.encode(golden["texts"], instruction=case["instruction"], steps=case["K"])
    cosines = (ours * np.asarray(case["embeddings"])).sum(-1) / np.linalg.norm(case["embeddings"], axis=-1)
    assert cosines.min() > 0.9999, cosines


def test_an_adapter_naming_a_path_of_the_authors_machine_falls_back_to_the_tables_base(fake_hub):
    _golden()
    fake_hub("mistralai/Mistral-7B-v0.1", REFERENCE / "tiny-mistral")
    fake_hub(
        "Roytsai27/GIRCSE-Mistral7B", REFERENCE / "tiny-mistral-lora", edit=rebase_adapter("/home/authors/Mistral-7B")
    )
    assert genembed.load("Roytsai27/GIRCSE-Mistral7B").backbone.name == "mistralai/Mistral-7B-v0.1"


def test_a_published_adapter_whose_base_is_missing_offline_names_the_base(fake_hub):
    _golden()
    fake_hub(
        "Roytsai27/GIRCSE-Mistral7B", REFERENCE / "tiny-mistral-lora", edit=rebase_adapter("mistralai/Mistral-7B-v0.1")
    )
    with pytest.raises(genembed.MissingModelError, match="hf download mistralai/Mistral-7B-v0.1"):
        genembed.load("Roytsai27/GIRCSE-Mistral7B")


def test_a_published_full_model_loads_with_grit_settings(fake_hub, tiny_folder):
    fake_hub("GritLM/GritLM-7B", tiny_folder)
    model = genembed.load("GritLM/GritLM-7B")
    assert (model.method, model.attention, model.prompt_format, model.center, model.adapter) == (
        "grit",
        "bidirectional",
        "gritlm",
        False,
        None,
    )
    assert model.backbone.name == "GritLM/GritLM-7B"
    vectors = model.encode_query(["how do plants make food?"])
    explicit = model.encode(["how do plants make food?"], instruction=PUBLISHED["GritLM/GritLM-7B"].query_instruction)
    assert np.allclose(vectors, explicit)


def test_an_unknown_adapter_repo_loads_on_its_base_with_plain_settings(fake_hub):
    _golden()
    fake_hub("mistralai/Mistral-7B-v0.1", REFERENCE / "tiny-mistral")
    fake_hub("someone/my-lora", REFERENCE / "tiny-mistral-lora", edit=rebase_adapter("mistralai/Mistral-7B-v0.1"))
    model = genembed.load("someone/my-lora")
    assert model.adapter == "someone/my-lora" and model.backbone.name == "mistralai/Mistral-7B-v0.1"
    assert model.steps == 5 and model.prompt_format is None  # genembed's defaults, not a published entry's


def test_inspect_uses_a_published_gircse_models_own_prompt_format(published_gircse):
    model = genembed.load("Roytsai27/GIRCSE-Mistral7B")

    def tokens(**kwargs):
        return [step.tokens for step in model.inspect("a cat", instruction="Find it.", steps=2, top=3, **kwargs)]

    assert tokens() == tokens(prompt_format="gircse") != tokens(prompt_format="chat")


def test_an_adapter_can_be_a_hub_id_too(fake_hub):
    _golden()
    fake_hub("mistralai/Mistral-7B-v0.1", REFERENCE / "tiny-mistral")
    fake_hub("someone/my-lora", REFERENCE / "tiny-mistral-lora")
    model = genembed.load("mistralai/Mistral-7B-v0.1", adapter="someone/my-lora")
    assert model.adapter == "someone/my-lora" and hasattr(model.backbone.model, "peft_config")
    with pytest.raises(genembed.MissingModelError, match="hf download someone/other-lora"):
        genembed.load("mistralai/Mistral-7B-v0.1", adapter="someone/other-lora")
    with pytest.raises(genembed.MissingModelError, match="adapter_config.json"):  # a missing folder stays a path
        genembed.load("mistralai/Mistral-7B-v0.1", adapter="./runs/missing-lora")


def test_an_adapter_that_stores_centers_loads_centred_on_them_from_the_hub_or_a_folder(fake_hub, tmp_path):
    """An adapter repo with ``centers.safetensors`` (as genembed's shipped adapters have) is used centred on
    the stored centers, as the same folder on disk is; one without stays uncentred."""
    import torch

    from genembed.encoders.center_files import CENTERS_FILE, write_centers
    from genembed.encoders.centering import calibration_digest, center_key

    _golden()
    fake_hub("mistralai/Mistral-7B-v0.1", REFERENCE / "tiny-mistral")
    fake_hub("someone/my-lora", REFERENCE / "tiny-mistral-lora", edit=rebase_adapter("mistralai/Mistral-7B-v0.1"))
    plain = genembed.load("someone/my-lora")
    assert plain.center is False
    texts, instruction = ["a cat sat on the mat", "stock prices fell"], "Find it."
    raw = plain.encode(texts, instruction=instruction)
    # a stored center no calibration would give: the encoding must subtract exactly it
    center = torch.linspace(-0.1, 0.1, raw.shape[1])
    key = center_key(plain.embed_settings(), instruction)

    def add_centers(folder):
        write_centers(folder / CENTERS_FILE, {key: center}, calibration_digest())

    centred_repo = fake_hub(
        "someone/centred-lora",
        REFERENCE / "tiny-mistral-lora",
        edit=lambda s: (rebase_adapter("mistralai/Mistral-7B-v0.1")(s), add_centers(s)),
    )
    for model in (
        genembed.load("someone/centred-lora"),
        genembed.load("mistralai/Mistral-7B-v0.1", adapter=centred_repo),
    ):
        assert model.center is True
        expected = raw - center.numpy()  # encode normalizes the centred vectors
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(model.encode(texts, instruction=instruction), expected, atol=1e-5)
    assert genembed.load("someone/centred-lora", center=False).center is False
