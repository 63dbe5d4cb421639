from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import genembed
from genembed.backbone import Backbone
from genembed.encoders.settings import EmbedSettings
from genembed.models.adapters import DEFAULT_ADAPTER, trained_for_generation
from genembed.training import ConfigError, DataError, train
from genembed.training.data import ContrastiveStream, FileSpec
from genembed.training.forward import tokenize_texts
from genembed.training.lora import freeze_lower_layers, make_trainable
from genembed.training.losses import ICRLoss
from genembed.training.objective import Objective

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "training"


def _eval_loss(model, tokenizer, assets, steps=3):
    """ICR loss of a fixed batch (all 48 rows of similar.jsonl) without gradients."""
    stream = ContrastiveStream(
        [FileSpec(str(assets / "similar.jsonl"), symmetric=True)], batch_size=24, hard_negatives=1, seed=123
    )
    batch = stream.next()
    q = tokenize_texts(tokenizer, batch.queries, batch.query_instructions, prompt_format="chat", max_length=40)
    d = tokenize_texts(tokenizer, batch.documents, batch.document_instructions, prompt_format="chat", max_length=40)
    with torch.no_grad():
        return Objective(model, EmbedSettings(steps=steps), ICRLoss(0.05))(q, d, batch.label_tensor())["loss"].item()


def test_thirty_steps_lower_the_loss_and_write_the_run_folder(tmp_path, tiny_folder, assets, run_config):
    cfg = run_config(tmp_path / "run", tiny_folder, train={"max_steps": 30, "save_every": 10, "warmup_steps": 3})
    base = genembed.load(tiny_folder).backbone
    before = _eval_loss(base.model, base.tokenizer, assets)
    result = train(cfg)
    after = _eval_loss(result.model, result.tokenizer, assets)
    assert after < before - 0.3, (before, after)  # observed: 3.53 -> 2.97 nats

    out = tmp_path / "run"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 31))
    assert {"loss", "rep", "reg", "gen", "L_1", "L_2", "L_3", "lr", "grad_norm"} <= set(records[0])
    assert "L_4" not in records[0]
    files = {Path(f.path).name for f in cfg.data.files}
    assert all(set(r["rows"]) <= files and sum(r["rows"].values()) == cfg.data.batch_size for r in records)
    assert records[0]["loss"] == pytest.approx(
        np.mean([records[0][f"L_{k}"] for k in (1, 2, 3)]) + records[0]["reg"], rel=1e-5
    )
    assert records[0]["lr"] == pytest.approx(1e-3) and records[2]["lr"] == pytest.approx(3e-3)  # warmup
    assert records[-1]["lr"] < records[10]["lr"]  # cosine decay
    assert (out / "metrics.png").stat().st_size > 10_000
    assert (out / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000020", "step-0000030"]  # keep 2
    saved = genembed.training.load_config(out / "genembed_train.yaml")
    assert saved.train.max_steps == 30 and saved.embedding.steps == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_loss"] == pytest.approx(records[-1]["loss"])


def test_adapter_folder_loads_back_with_genembed_load(tmp_path, tiny_folder, run_config):
    result = train(run_config(tmp_path / "run", tiny_folder, train={"max_steps": 3}))
    texts = ["A man is playing a guitar.", "Paris is the capital of France."]
    trained = genembed.GenerativeEmbedder(Backbone(result.model, result.tokenizer, "trained"))
    loaded = genembed.load(tiny_folder, adapter=tmp_path / "run")
    base = genembed.load(tiny_folder)
    expected = trained.encode(texts, steps=3)
    np.testing.assert_allclose(loaded.encode(texts, steps=3), expected, atol=1e-5)
    assert not np.allclose(base.encode(texts, steps=3), expected, atol=1e-3)  # training changed the embeddings


def test_a_jointly_trained_adapter_also_generates_an_embedding_only_one_does_not(tmp_path, tiny_folder, run_config):
    generative = {"files": [str(ASSETS / "chat.jsonl")], "batch_size": 2, "max_length": 48}
    train(
        run_config(
            tmp_path / "joint", tiny_folder, embedding={"method": "grit"}, generative=generative, train={"max_steps": 1}
        )
    )
    train(run_config(tmp_path / "embed", tiny_folder, train={"max_steps": 1}))
    joint = genembed.load(tiny_folder, adapter=tmp_path / "joint")
    assert joint.generation_adapter == "adapter" and trained_for_generation(tmp_path / "joint")
    assert genembed.load(tiny_folder, adapter=tmp_path / "embed").generation_adapter == "base"
    assert genembed.load(tiny_folder).generation_adapter == "base"
    # the shipped default was trained with a next-token loss too: it chats with its own adapter
    assert trained_for_generation(DEFAULT_ADAPTER)
    # a weight of 0 turns the next-token loss off
    saved = tmp_path / "joint" / "genembed_train.yaml"
    config = yaml.safe_load(saved.read_text())
    config["generative"]["weight"] = 0.0
    saved.write_text(yaml.safe_dump(config))
    assert not trained_for_generation(tmp_path / "joint")


def test_full_fine_tuning_saves_a_loadable_model(tmp_path, tiny_folder, run_config):
    result = train(run_config(tmp_path / "run", tiny_folder, lora={"enabled": False}, train={"max_steps": 2}))
    assert (tmp_path / "run" / "model.safetensors").is_file() and not (
        tmp_path / "run" / "adapter_config.json"
    ).exists()
    loaded = genembed.load(tmp_path / "run")
    torch.testing.assert_close(
        loaded.backbone.model.model.layers[0].mlp.up_proj.weight, result.model.model.layers[0].mlp.up_proj.weight
    )


def test_interrupted_and_resumed_run_ends_where_an_uninterrupted_one_does(
    tmp_path, tiny_folder, monkeypatch, run_config
):
    sections = {"lora": {"r": 8, "alpha": 16, "dropout": 0.1}, "train": {"max_steps": 10, "save_every": 4}}
    full = train(run_config(tmp_path / "full", tiny_folder, **sections))

    calls = {"n": 0}
    original = Objective.forward

    def crash_at_step_7(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Objective, "forward", crash_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        train(run_config(tmp_path / "resumed", tiny_folder, **sections))
    monkeypatch.setattr(Objective, "forward", original)
    records = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert len(records) == 6  # steps 1-6 done, checkpoint at step 4
    with pytest.raises(ConfigError, match="not empty"):
        train(run_config(tmp_path / "resumed", tiny_folder, **sections))
    resumed = train(run_config(tmp_path / "resumed", tiny_folder, **sections), resume=True)

    # exactly the same run: weights, optimizer moments, scheduler and RNG states (dropout) all restored
    assert resumed.final_loss == full.final_loss
    a = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in b] == list(range(1, 11))
    assert [(r["loss"], r["grad_norm"], r["lr"]) for r in b] == [(r["loss"], r["grad_norm"], r["lr"]) for r in a]
    for (name, p), (_, q) in zip(full.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        if p.requires_grad:
            assert torch.equal(p, q), name


def test_resume_may_switch_gradient_checkpointing_on(tmp_path, tiny_folder, run_config):
    # a memory setting that may change on resume; without dropout it does not change the result
    sections = {"lora": {"r": 8, "alpha": 16, "dropout": 0.0}, "train": {"max_steps": 2, "save_every": 2}}
    train(run_config(tmp_path / "run", tiny_folder, **sections))
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    longer = {"max_steps": 4, "save_every": 2}
    plain = train(run_config(tmp_path / "run", tiny_folder, **{**sections, "train": longer}), resume=True)
    shutil.rmtree(tmp_path / "run")
    (tmp_path / "copy").rename(tmp_path / "run")
    lighter = {**sections, "train": {**longer, "gradient_checkpointing": True, "checkpoint_chunk": 4}}
    resumed = train(run_config(tmp_path / "run", tiny_folder, **lighter), resume=True)
    assert resumed.steps == 4 and resumed.final_loss == pytest.approx(plain.final_loss, rel=1e-4)


def test_resume_may_switch_shared_prefixes_on(tmp_path, tiny_folder, run_config):
    # the same loss and gradients up to rounding, computed with each instruction's prefix once per batch
    sections = {"lora": {"r": 8, "alpha": 16, "dropout": 0.0}, "train": {"max_steps": 2, "save_every": 2}}
    train(run_config(tmp_path / "run", tiny_folder, **sections))
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    longer = {**sections, "train": {"max_steps": 4, "save_every": 2}}
    plain = train(run_config(tmp_path / "run", tiny_folder, **longer), resume=True)
    shutil.rmtree(tmp_path / "run")
    (tmp_path / "copy").rename(tmp_path / "run")
    shared = train(run_config(tmp_path / "run", tiny_folder, **longer, embedding={"share_prefix": True}), resume=True)
    assert shared.steps == 4 and shared.final_loss == pytest.approx(plain.final_loss, rel=1e-4)


def test_resume_refuses_a_changed_config(tmp_path, tiny_folder, run_config):
    train(run_config(tmp_path / "run", tiny_folder, train={"max_steps": 2, "save_every": 1}))
    changed = run_config(tmp_path / "run", tiny_folder, train={"max_steps": 4}, loss={"temperature": 0.1})
    with pytest.raises(ConfigError, match=r"loss\.temperature.*only .*embedding\.share_prefix.* may change"):
        train(changed, resume=True)
    longer = train(run_config(tmp_path / "run", tiny_folder, train={"max_steps": 4}), resume=True)
    assert longer.steps == 4
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 4


def test_resume_accepts_a_run_saved_before_keys_were_added(tmp_path, tiny_folder, run_config):
    train(run_config(tmp_path / "run", tiny_folder, train={"max_steps": 2, "save_every": 1}))
    saved = tmp_path / "run" / "genembed_train.yaml"
    raw = yaml.safe_load(saved.read_text())
    for key in ("distill_weight", "distill_teacher", "distill_temperature"):  # what an older genembed wrote
        del raw["loss"][key]
    for item in raw["data"]["files"]:
        del item["distill"]
    saved.write_text(yaml.safe_dump(raw))
    changed = run_config(tmp_path / "run", tiny_folder, train={"max_steps": 3}, loss={"distill_weight": 1.0})
    with pytest.raises(ConfigError, match=r"differs from the saved run in \['loss\.distill_weight'\]"):
        train(changed, resume=True)
    assert train(run_config(tmp_path / "run", tiny_folder, train={"max_steps": 3}), resume=True).steps == 3


def test_bad_data_fails_before_the_model_loads(tmp_path, assets, run_config):
    bad = tmp_path / "bad.jsonl"
    bad.write_text((assets / "similar.jsonl").read_text().splitlines()[0] + '\n{"query": "q", "pos": []}\n')
    cfg = run_config(tmp_path / "run", tmp_path / "no-such-model", data={"files": [{"path": str(bad)}]})
    with pytest.raises(DataError, match=rf"{bad}:2: field 'pos' is empty"):
        train(cfg)


def test_joint_grit_training_with_generative_data(tmp_path, tiny_folder, assets, run_config):
    cfg = run_config(
        tmp_path / "run",
        tiny_folder,
        embedding={"method": "grit"},
        lora={"enabled": False},
        generative={"files": [str(assets / "chat.jsonl")], "batch_size": 4, "weight": 1.0, "aggregation": "sample"},
        train={"max_steps": 15, "lr": 5e-3},
    )
    train(cfg)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["gen"] > 0 and r["loss"] == pytest.approx(r["rep"] + r["gen"], rel=1e-5) for r in records)
    assert "L_2" not in records[0] and records[0]["reg"] == 0
    first, last = np.mean([r["gen"] for r in records[:3]]), np.mean([r["gen"] for r in records[-3:]])
    assert last < first - 0.3, (first, last)  # observed: 5.92 -> 5.27


def test_joint_gircse_training_with_the_base_kl_keeps_generation_near_the_base(
    tmp_path, tiny_folder, assets, run_config
):
    """generative.loss base_kl on a LoRA run: the KL starts at 0 (a fresh adapter is the base model), stays
    small while the contrastive loss moves the adapter, and is logged as the generative term."""
    cfg = run_config(
        tmp_path / "run",
        tiny_folder,
        lora={"r": 4, "alpha": 8},
        generative={"files": [str(assets / "chat.jsonl")], "batch_size": 2, "loss": "base_kl", "weight": 1.0},
        train={"max_steps": 6, "lr": 5e-3},
    )
    train(cfg)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["gen"] == pytest.approx(0.0, abs=1e-6)
    assert all(r["loss"] == pytest.approx(r["rep"] + r["gen"], rel=1e-5, abs=1e-6) for r in records)
    assert any(r["gen"] > 1e-6 for r in records[1:])  # the adapter moved, the KL saw it


def test_bf16_autocast_accumulation_and_checkpointing_options(tmp_path, tiny_folder, run_config):
    base = {"max_steps": 2, "grad_accum": 2}
    fp32 = train(run_config(tmp_path / "fp32", tiny_folder, train=base))
    bf16 = train(
        run_config(
            tmp_path / "bf16",
            tiny_folder,
            train={**base, "precision": "bf16", "gradient_checkpointing": True, "checkpoint_chunk": 4},
        )
    )
    assert np.isfinite(bf16.final_loss)
    assert bf16.final_loss == pytest.approx(fp32.final_loss, rel=0.05)
    assert bf16.final_loss != fp32.final_loss  # autocast really ran in bfloat16


def test_init_from_continues_a_trained_adapter(tmp_path, tiny_folder, run_config):
    first = train(run_config(tmp_path / "first", tiny_folder, lora={"r": 4, "alpha": 8}, train={"max_steps": 3}))
    trained = {k: v.clone() for k, v in first.model.named_parameters() if v.requires_grad}
    # lr 0: the continued run's weights are the first run's exactly, with the first adapter's rank
    cont = train(
        run_config(
            tmp_path / "cont",
            tiny_folder,
            lora={"init_from": str(tmp_path / "first")},
            train={"max_steps": 1, "lr": 0.0, "warmup_steps": 0},
        )
    )
    continued = {k: v for k, v in cont.model.named_parameters() if v.requires_grad}
    assert set(continued) == set(trained)
    for name, value in trained.items():
        torch.testing.assert_close(continued[name], value)
    assert json.loads((tmp_path / "cont" / "adapter_config.json").read_text())["r"] == 4
    texts = ["A man is playing a guitar.", "Paris is the capital of France."]
    np.testing.assert_allclose(
        genembed.load(tiny_folder, adapter=tmp_path / "cont").encode(texts, steps=3),
        genembed.load(tiny_folder, adapter=tmp_path / "first").encode(texts, steps=3),
        atol=1e-5,
    )


def test_frozen_lower_layers_keep_their_weights_and_the_upper_ones_get_the_same_gradient(
    tmp_path, tiny_folder, tiny, run_config
):
    # the gradients of the upper layers' weights do not depend on whether the lower ones train
    texts = ["A man is playing a guitar.", "Someone plays the guitar.", "The sky is blue today."]
    batch = tokenize_texts(tiny.tokenizer, texts, ["I"] * 3, prompt_format="chat", max_length=40)
    grads = {}
    for frozen in (0, 1):
        torch.manual_seed(0)  # the same LoRA A both times
        model = make_trainable(copy.deepcopy(tiny.model), lora=True, r=4, alpha=8, dropout=0.0)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.05)
        if frozen:
            assert freeze_lower_layers(model, frozen) > 0
        objective = Objective(model, EmbedSettings(steps=3), ICRLoss(0.05))
        objective(batch, batch, torch.arange(3), None)["objective"].backward()
        grads[frozen] = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert grads[1] and all(".layers.1." in n for n in grads[1])
    assert set(grads[0]) > set(grads[1])
    for name, grad in grads[1].items():
        torch.testing.assert_close(grad, grads[0][name], rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match=r"lora.frozen_layers must be in \[0, 2\) for this 2-layer model, got 2"):
        freeze_lower_layers(model, 2)

    # a run: the lower layer's adapter stays as it started, the upper one trains
    run = train(run_config(tmp_path / "run", tiny_folder, lora={"frozen_layers": 1}, train={"max_steps": 2}))
    trained = dict(run.model.named_parameters())
    assert not any(p.requires_grad for n, p in trained.items() if ".layers.0." in n)
    assert all(p.requires_grad for n, p in trained.items() if ".layers.1." in n and "lora_" in n)
    moved = {n for n, p in trained.items() if "lora_B" in n and p.abs().sum() > 0}
    assert moved and all(".layers.1." in n for n in moved)  # B starts at zero: only the upper layer's moved


def test_frozen_layers_must_leave_a_layer_to_train(tmp_path, tiny_folder, run_config):
    cfg = run_config(tmp_path / "run", tiny_folder, lora={"frozen_layers": 2}, train={"max_steps": 1})
    with pytest.raises(ConfigError, match=r"lora.frozen_layers must be in \[0, 2\)"):
        train(cfg)


def test_init_from_names_a_folder_without_an_adapter(tmp_path, tiny_folder, run_config):
    cfg = run_config(tmp_path / "run", tiny_folder, lora={"init_from": str(tmp_path)}, train={"max_steps": 1})
    with pytest.raises(FileNotFoundError, match=r"lora.init_from: .* holds no adapter_config.json"):
        train(cfg)
    with pytest.raises(ConfigError, match="lora.init_from needs lora.enabled=true"):
        run_config(tmp_path / "run2", tiny_folder, lora={"init_from": "default", "enabled": False})


def _native_bf16(monkeypatch, native: bool) -> None:
    """Make the CPU look as if it computes bfloat16 natively (AVX512-BF16) or not."""
    monkeypatch.delenv("GENEMBED_DTYPE", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_on_a_gpu_that_computes_it_natively(monkeypatch, native):
    from genembed.training.run import training_precision

    _native_bf16(monkeypatch, native)
    # never on a CPU: autocast there keeps a cast copy of every frozen weight per call for the backward pass
    assert training_precision("auto", "cpu") == "fp32"
    assert training_precision("fp32", "cpu") == "fp32" and training_precision("bf16", "cpu") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: native)
    assert training_precision("auto", "cuda") == ("bf16" if native else "fp32")
    assert training_precision("auto", "cuda:0") == ("bf16" if native else "fp32")


def test_bf16_on_a_cpu_without_it_warns_and_the_run_says_what_it_ran_in(
    tmp_path, tiny_folder, run_config, monkeypatch, caplog
):
    _native_bf16(monkeypatch, False)
    with caplog.at_level("WARNING", logger="genembed.training"):
        train(run_config(tmp_path / "bf16", tiny_folder, train={"max_steps": 1, "precision": "bf16"}))
    assert "train.precision=bf16 on cpu, which does not compute bfloat16 natively" in caplog.text
    assert json.loads((tmp_path / "bf16" / "summary.json").read_text())["precision"] == "bf16"

    caplog.clear()
    with caplog.at_level("WARNING", logger="genembed.training"):
        train(run_config(tmp_path / "auto", tiny_folder, train={"max_steps": 2, "save_every": 1, "precision": "auto"}))
    assert "natively" not in caplog.text
    assert json.loads((tmp_path / "auto" / "summary.json").read_text())["precision"] == "fp32"
    # a run may resume on another machine in another precision
    resumed = train(
        run_config(tmp_path / "auto", tiny_folder, train={"max_steps": 3, "precision": "bf16"}), resume=True
    )
    assert resumed.steps == 3
    assert json.loads((tmp_path / "auto" / "summary.json").read_text())["precision"] == "bf16"


def test_precision_must_be_one_of_the_choices(tmp_path, tiny_folder, run_config):
    with pytest.raises(ConfigError, match=r"train\.precision.*'fp16'"):
        train(run_config(tmp_path / "run", tiny_folder, train={"max_steps": 1, "precision": "fp16"}))
