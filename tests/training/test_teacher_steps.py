"""Training from cached teacher targets: the KL and the embedding regression on every z_k, single-text
steps at a fixed share of the steps, the teacher map beside the adapter, resumption."""

from __future__ import annotations

import json
import logging
import re
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from genembed.encoders.settings import EmbedSettings
from genembed.training import ConfigError, step, train
from genembed.training.data import FileSpec, ShareSchedule, SingleStream
from genembed.training.data.single import read_single_prompts, read_single_texts
from genembed.training.forward import tokenize_texts
from genembed.training.losses import EmbeddingDistillation, ICRLoss, SimilarityDistillation
from genembed.training.objective import Objective
from genembed.training.teacher_map import MAP_FILE
from genembed.training.teacher_targets import MissingTargetsError, TargetStore, build_targets, training_texts


@pytest.fixture(scope="module")
def targets(tmp_path_factory, tiny_teacher, assets):
    """The tiny teacher's cached vectors of every text of the two asset files."""
    root = tmp_path_factory.mktemp("targets")
    texts = training_texts([assets / "similar.jsonl", assets / "qa_pairs.jsonl"])
    build_targets(texts, root, str(tiny_teacher), device="cpu", progress=False)
    return root


def _records(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_single_terms_are_the_kl_over_texts_by_texts_and_the_regression_at_every_step():
    torch.manual_seed(0)
    z, t = torch.randn(6, 3, 8), torch.randn(6, 4)
    distill, regress = SimilarityDistillation(0.05, 0.1), EmbeddingDistillation(8, 4)
    distill.weight, regress.weight = 2.0, 0.5
    terms = {"distill": distill, "regress": regress}
    objective = Objective(None, EmbedSettings(steps=3), ICRLoss(0.05), terms=terms)
    terms = objective.single_terms(z, t)
    tn = F.normalize(t, dim=-1)
    kls, regs = [], []
    for k in range(3):  # reference: each text against the 5 others, the teacher's cosines vs the student's
        zn = F.normalize(z[:, k], dim=-1)
        for i in range(6):
            others = [j for j in range(6) if j != i]
            p_t = torch.softmax(tn[i] @ tn[others].T / 0.1, dim=0)
            log_s = torch.log_softmax(zn[i] @ zn[others].T / 0.05, dim=0)
            kls.append((p_t * (p_t.log() - log_s)).sum())
        regs.append(regress(z[:, k], t))
    kl, reg = terms.terms["distill"].item(), terms.terms["regress"].item()
    assert kl == pytest.approx(torch.stack(kls).mean().item(), rel=1e-5)
    assert reg == pytest.approx(torch.stack(regs).mean().item(), rel=1e-6)
    assert terms.total.item() == pytest.approx(2.0 * kl + 0.5 * reg, rel=1e-6)
    assert terms.rep.item() == 0 and terms.step_losses.shape == (3,)
    last = ICRLoss(0.05, final_step_only=True)
    final_only = Objective(None, EmbedSettings(steps=3), last, terms={"regress": regress})
    only = final_only.single_terms(z, t)
    assert only.terms["regress"].item() == pytest.approx(regress(z[:, 2], t).item(), rel=1e-6)
    assert only.terms["distill"].item() == 0  # a registered term not configured is logged as 0


def test_contrastive_regression_covers_the_distilled_queries_and_their_documents():
    torch.manual_seed(1)
    q, d = torch.randn(2, 3, 8), torch.randn(4, 3, 8)
    tq, td = torch.randn(2, 4), torch.randn(4, 4)
    regress = EmbeddingDistillation(8, 4, "mse")
    regress.weight = 3.0
    objective = Objective(None, EmbedSettings(steps=3), ICRLoss(0.05), terms={"regress": regress})
    rows, doc_rows = torch.tensor([True, False]), torch.tensor([True, True, False, False])
    terms = objective.representation_terms(
        q, d, torch.tensor([0, 2]), None, teacher_queries=tq, teacher_documents=td, distill_rows=rows,
        document_rows=doc_rows,
    )  # fmt: skip
    student, target = torch.cat([q[:1], d[:2]]), torch.cat([tq[:1], td[:2]])
    expected = torch.stack([regress(student[:, k], target) for k in range(3)]).mean()
    assert terms.terms["regress"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert terms.total.item() == pytest.approx(terms.rep.item() + 3.0 * expected.item(), rel=1e-6)
    with pytest.raises(ValueError, match="pass teacher_queries/documents"):
        objective.representation_terms(q, d, torch.tensor([0, 2]), None)


def _config(
    run_config, out, tiny_folder, tiny_teacher, targets, assets, *, single=None, loss=None, train=None, **sections
):
    loss = {"distill_teacher": str(tiny_teacher), "distill_targets": str(targets), **(loss or {})}
    single = {"files": [str(assets / "qa_pairs.jsonl")], "batch_size": 8, **(single or {})}
    sections |= {"loss": loss, "single": single, "train": {"max_steps": 6, **(train or {})}}
    return run_config(out, tiny_folder, **sections)


def test_a_mixed_run_takes_single_steps_at_their_share_and_saves_the_map(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config
):
    loss = {"distill_weight": 1.0, "regress_weight": 0.5}
    cfg = _config(run_config, tmp_path / "run", tiny_folder, tiny_teacher, targets, assets, loss=loss,
                  single={"share": 0.5})  # fmt: skip
    result = train(cfg)
    records = _records(tmp_path / "run")
    assert [r["objective"] for r in records] == ShareSchedule({"contrastive": 0.5, "single": 0.5}).plan(6)
    for r in records:
        assert r["distill"] > 0 and r["regress"] > 0
        assert r["loss"] == pytest.approx(r["rep"] + r["distill"] + 0.5 * r["regress"], rel=1e-5)
        if r["objective"] == "single":
            assert r["rep"] == 0 and set(r["rows"]) == {"qa_pairs.jsonl"}
        else:
            assert r["rep"] > 0 and set(r["rows"]) == {"similar.jsonl"}
    from safetensors.torch import load_file

    weight = load_file(str(tmp_path / "run" / MAP_FILE))["map.weight"]
    assert weight.shape == (32, result.model.config.hidden_size)  # teacher (32) x student
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [("single" in item) for item in summary["data"]] == [False, True]


def test_cached_targets_give_the_online_teachers_kl(tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config):
    runs = {}
    for name, cached in (("online", False), ("cached", True)):
        cfg = _config(run_config, tmp_path / name, tiny_folder, tiny_teacher, targets, assets,
                      loss={"distill_weight": 1.0, **({} if cached else {"distill_targets": None})},
                      train={"max_steps": 3})  # fmt: skip
        train(cfg)
        runs[name] = [(r["loss"], r["distill"]) for r in _records(tmp_path / name)]
    np.testing.assert_allclose(runs["cached"], runs["online"], rtol=2e-2)  # targets are stored in float16


def test_grad_cache_and_resumption_reproduce_the_plain_run(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config, caplog
):
    loss = {"distill_weight": 1.0, "regress_weight": 1.0, "regress_loss": "mse"}

    def cfg_for(chunk):
        return _config(run_config, tmp_path / f"c{chunk}", tiny_folder, tiny_teacher, targets, assets, loss=loss,
                       single={"share": 0.7}, train={"grad_cache_chunk": chunk, "save_every": 2})  # fmt: skip

    runs = {}
    for chunk in (0, 3):
        train(cfg_for(chunk))
        runs[chunk] = [(r["loss"], r["distill"], r["regress"]) for r in _records(tmp_path / f"c{chunk}")]
    np.testing.assert_allclose(runs[3], runs[0], rtol=1e-3)
    # interrupted after step 4 (a contrastive and a single step come after it): the resumed run continues
    # both streams and the teacher map exactly where they were
    shutil.rmtree(tmp_path / "c0" / "checkpoints" / "step-0000006")
    assert (tmp_path / "c0" / "checkpoints" / "step-0000004").is_dir()
    with caplog.at_level(logging.INFO, logger="genembed.training"):
        train(cfg_for(0), resume=True)
    assert "(step 4)" in caplog.text
    resumed = [(r["loss"], r["distill"], r["regress"]) for r in _records(tmp_path / "c0")]
    np.testing.assert_allclose(resumed, runs[0], rtol=1e-5)


def test_a_generative_batch_rides_on_every_step_and_resumes_where_it_was(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config, caplog
):
    """generative.every_step: single-text steps carry a generative batch too (their loss includes it), the
    plain-text rows distilled from the base weights; grad cache and resumption give the plain run's losses."""
    gen_file = tmp_path / "gen.jsonl"
    gen_file.write_text(
        (assets / "chat.jsonl").read_text() + '{"text": "Plain prose is read bare, every token distilled."}\n'
    )
    generative = {"files": [str(gen_file)], "batch_size": 2, "text_loss": "base_kl", "every_step": True}

    def cfg_for(chunk):
        return _config(run_config, tmp_path / f"g{chunk}", tiny_folder, tiny_teacher, targets, assets,
                       loss={"distill_weight": 1.0}, single={"share": 0.5}, generative=generative,
                       train={"grad_cache_chunk": chunk, "save_every": 2})  # fmt: skip

    runs = {}
    for chunk in (0, 3):
        train(cfg_for(chunk))
        runs[chunk] = [(r["loss"], r["gen"]) for r in _records(tmp_path / f"g{chunk}")]
    records = _records(tmp_path / "g0")
    assert {r["objective"] for r in records} == {"single", "contrastive"}
    assert all(r["gen"] > 0 for r in records)  # single steps included
    single = [r for r in records if r["objective"] == "single"]
    assert all(r["loss"] == pytest.approx(r["distill"] + r["gen"], rel=1e-5) for r in single)
    np.testing.assert_allclose(runs[3], runs[0], rtol=1e-3)
    shutil.rmtree(tmp_path / "g0" / "checkpoints" / "step-0000006")
    with caplog.at_level(logging.INFO, logger="genembed.training"):
        train(cfg_for(0), resume=True)
    assert "(step 4)" in caplog.text
    resumed = [(r["loss"], r["gen"]) for r in _records(tmp_path / "g0")]
    np.testing.assert_allclose(resumed, runs[0], rtol=1e-5)  # the generative stream continued where it was


@pytest.mark.parametrize(
    ("loss", "single", "message"),
    [
        ({"regress_weight": 1.0}, {}, "loss.regress_weight > 0 needs loss.distill_targets"),
        ({"regress_weight": 1.0, "distill_targets": "t", "regress_loss": "l1"}, {}, "loss.regress_loss must be one of"),
        ({}, {"share": 1.5}, "single.share must be <= 1"),
        ({}, {"share": 0.5}, "single.share > 0 needs single.files"),
        ({}, {"share": 0.5, "files": ["a.jsonl"]}, "single.share > 0 needs loss.distill_targets"),
        ({"distill_targets": "t"}, {"share": 0.5, "files": ["a.jsonl"]}, "needs loss.distill_weight or loss.regress"),
        ({}, {"instruction": "query"}, "single.instruction must be one of .'none', 'row'., got 'query'"),
    ],
)
def test_config_errors_name_the_key(tmp_path, loss, single, message, run_config):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        run_config(tmp_path, None, loss=loss, single=single)


def test_a_run_computes_the_targets_its_store_lacks_once_and_keeps_them(
    tmp_path, tiny_folder, tiny_teacher, assets, run_config, caplog
):
    root, teacher = tmp_path / "targets", str(tiny_teacher)
    build_targets(training_texts([assets / "qa_pairs.jsonl"]), root, teacher, device="cpu", progress=False)
    before = TargetStore.open(root, teacher)
    loss = {"distill_weight": 1.0, "distill_teacher": teacher, "distill_targets": str(root)}
    cfg = run_config(tmp_path / "run", tiny_folder, loss=loss, train={"max_steps": 2})  # similar.jsonl: not stored
    with caplog.at_level(logging.WARNING, logger="genembed.training.setup"):
        train(cfg)
    assert re.search(r"\d+ of the \d+ training texts have no cached target .* the teacher computes them", caplog.text)
    after = TargetStore.open(root, teacher)
    added = before.missing(training_texts([assets / "similar.jsonl"]))
    drawn = [text for text in added if not after.missing([text])]
    assert drawn and len(after.index) == len(before.index) + len(drawn)  # the batches' texts, each once
    reference = build_targets(drawn, tmp_path / "reference", teacher, device="cpu", progress=False)
    torch.testing.assert_close(after.vectors(drawn), reference.vectors(drawn), rtol=0, atol=2e-3)
    old = training_texts([assets / "qa_pairs.jsonl"])
    torch.testing.assert_close(after.vectors(old), before.vectors(old), rtol=0, atol=0)  # the old ones untouched


def test_a_run_without_a_store_loads_the_teacher_once_to_start_and_fill_it(
    tmp_path, tiny_folder, tiny_teacher, assets, run_config, monkeypatch
):
    from genembed.training.teacher import Teacher

    loads = []
    load = Teacher.load.__func__

    def counted(cls, *args, **kwargs):
        loads.append(args[0])
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(Teacher, "load", classmethod(counted))
    root, teacher = tmp_path / "targets", str(tiny_teacher)
    loss = {"distill_weight": 1.0, "distill_teacher": teacher, "distill_targets": str(root)}
    train(run_config(tmp_path / "run", tiny_folder, loss=loss, train={"max_steps": 2}))
    store = TargetStore.open(root, teacher)
    assert loads == [teacher] and len(store.index) > 0 and store.max_length == 128  # the tiny teacher's own
    train(run_config(tmp_path / "again", tiny_folder, loss=loss, train={"max_steps": 1}))
    assert loads == [teacher]  # its first step's texts are all stored now: no load at all


def test_a_store_fills_a_lookup_miss_with_its_encoder_and_saves_a_chunk(tmp_path):
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.stack([np.full(4, float(len(t)), np.float32) + np.arange(4) for t in texts])

    store = build_targets(["one"], tmp_path, "fake", encode=encode, dimension=4, progress=False)
    with pytest.raises(MissingTargetsError, match="1 of 2 texts have no cached target of fake"):
        store.vectors(["one", "three"])
    store.fill_with(encode)
    got = store.vectors(["one", "three", "three", "sixteen"])
    assert calls[-1] == ["three", "sixteen"]  # the misses only, each once
    torch.testing.assert_close(got[1], F.normalize(torch.arange(4.0) + 5, dim=0), atol=1e-3, rtol=0)
    store.vectors(["three"])
    assert len(calls) == 2  # nothing computed twice
    reopened = TargetStore.open(tmp_path, "fake")
    assert sorted(p.name for p in store.folder.glob("chunk-*")) == [
        "chunk-000000.safetensors",
        "chunk-000001.safetensors",
    ]
    torch.testing.assert_close(reopened.vectors(["sixteen", "one"]), store.vectors(["sixteen", "one"]))


def test_a_run_without_a_store_creates_one_read_at_the_configured_length(
    tmp_path, tiny_folder, tiny_teacher, run_config
):
    root, teacher = tmp_path / "targets", str(tiny_teacher)
    loss = {"distill_weight": 1.0, "distill_teacher": teacher, "distill_targets": str(root), "distill_max_length": 16}
    train(run_config(tmp_path / "run", tiny_folder, loss=loss, train={"max_steps": 1}))
    store = TargetStore.open(root, teacher)
    assert store.max_length == 16 and len(store.index) >= 12  # one batch: 6 queries, their positives and negatives
    loss["distill_max_length"] = 12
    with pytest.raises(ConfigError, match=r"loss.distill_max_length is 12, but .* read at 16 tokens"):
        train(run_config(tmp_path / "run2", tiny_folder, loss=loss, train={"max_steps": 1}))


def test_a_multi_process_run_needs_a_complete_store(tmp_path, tiny_teacher, assets, run_config):
    from genembed.training.data import ContrastiveStream
    from genembed.training.setup import _open_targets

    root = tmp_path / "targets"
    build_targets(training_texts([assets / "qa_pairs.jsonl"]), root, str(tiny_teacher), device="cpu", progress=False)
    cfg = run_config(tmp_path / "run", None, loss={
        "distill_weight": 1.0, "distill_teacher": str(tiny_teacher), "distill_targets": str(root)})  # fmt: skip
    with pytest.raises(MissingTargetsError, match=r"of the \d+ training texts have no cached target .*teacher-targets"):
        _open_targets(cfg, ContrastiveStream.from_config(cfg, 2), None, 2, "cpu")


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"data": {"files": [{"path": "a.jsonl", "share": 1.5}]}}, r"data.files[0].share must be in (0, 1], got 1.5"),
        ({"single": {"files": [{"path": "a.jsonl", "share": 0.5}]}}, "single.files[0].share: shares apply to data"),
        (
            {"data": {"files": [{"path": "a.jsonl", "share": 0.5}], "one_file_per_batch": False}},
            "needs data.one_file_per_batch=true",
        ),
    ],
)
def test_file_share_errors_name_the_key(tmp_path, sections, message, run_config):
    with pytest.raises(ConfigError) as info:
        run_config(tmp_path, None, **sections)
    assert message in str(info.value)


def test_targets_without_a_teacher_loss_are_not_asked(tmp_path, tiny_folder, tiny_teacher, assets, run_config):
    root = tmp_path / "targets"  # covers qa_pairs only, not the run's similar.jsonl
    build_targets(training_texts([assets / "qa_pairs.jsonl"]), root, str(tiny_teacher), device="cpu", progress=False)
    loss = {"distill_teacher": str(tiny_teacher), "distill_targets": str(root)}
    train(run_config(tmp_path / "run", tiny_folder, loss=loss, train={"max_steps": 2}))
    assert [r["distill"] + r["regress"] for r in _records(tmp_path / "run")] == [0, 0]


def test_a_run_of_single_text_steps_only_needs_no_contrastive_data(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config
):
    cfg = _config(run_config, tmp_path / "run", tiny_folder, tiny_teacher, targets, assets,
                  loss={"regress_weight": 1.0}, single={"share": 1.0}, train={"max_steps": 3})  # fmt: skip
    cfg.data.files = []
    train(cfg)
    records = _records(tmp_path / "run")
    assert [r["objective"] for r in records] == ["single"] * 3 and all(r["distill"] == 0 for r in records)
    assert records[-1]["regress"] < records[0]["regress"]


def test_row_instructions_give_each_single_text_the_instruction_contrastive_training_gives_it(assets, tmp_path):
    qa, similar = assets / "qa_pairs.jsonl", assets / "similar.jsonl"
    rows = [json.loads(line) for line in qa.read_text().splitlines()]
    ask = rows[0]["instruction"]
    prompts = read_single_prompts(qa, doc_instruction="Represent the passage.")
    assert prompts == list(
        dict.fromkeys(
            [p for r in rows for p in [(r["query"], ask), *((t, "Represent the passage.") for t in r["pos"])]]
        )
    )
    sym = read_single_prompts(similar, symmetric=True)
    assert {inst for _, inst in sym} == {"Retrieve semantically similar text."}
    assert [text for text, _ in sym] == read_single_texts(similar)
    texts = tmp_path / "texts.jsonl"
    texts.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert read_single_prompts(texts, symmetric=True) == [("a", ""), ("b", "")]

    files = [FileSpec(str(qa)), FileSpec(str(similar), symmetric=True)]
    row = SingleStream(files, batch_size=8, seed=3, instruction="row", doc_instruction="Represent the passage.")
    bare = SingleStream(files, batch_size=8, seed=3)
    given, drawn = set(prompts) | set(sym), set()
    for _ in range(6):
        (texts_row, inst_row), (texts_bare, inst_bare) = row.next(), bare.next()
        assert texts_row == texts_bare and len(set(texts_row)) == 8 and inst_bare == [""] * 8
        assert set(zip(texts_row, inst_row, strict=True)) <= given
        drawn.update(inst_row)
    assert drawn == {ask, "Represent the passage.", "Retrieve semantically similar text."}
    with pytest.raises(ValueError, match="instruction must be one of none, row, got 'query'"):
        SingleStream(files, batch_size=8, seed=3, instruction="query")


def test_a_run_with_row_instructions_embeds_single_texts_under_them(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config, monkeypatch
):
    seen = []

    def spy(tokenizer, texts, instructions, **kwargs):
        seen.append((list(texts), list(instructions)))
        return tokenize_texts(tokenizer, texts, instructions, **kwargs)

    monkeypatch.setattr(step, "tokenize_texts", spy)
    runs = {}
    for mode in ("row", "none"):
        seen.clear()
        cfg = _config(run_config, tmp_path / mode, tiny_folder, tiny_teacher, targets, assets,
                      loss={"regress_weight": 1.0}, single={"share": 1.0, "instruction": mode},
                      train={"max_steps": 2})  # fmt: skip
        train(cfg)
        runs[mode] = [r["loss"] for r in _records(tmp_path / mode)]
        assert len(seen) == 2  # one tokenization per single step, no contrastive step
        ask = "Given a question, retrieve passages that answer it."
        questions = {json.loads(line)["query"] for line in (assets / "qa_pairs.jsonl").read_text().splitlines()}
        for texts, instructions in seen:
            expected = [ask if mode == "row" and t in questions else "" for t in texts]
            assert instructions == expected
        assert any(inst for _, insts in seen for inst in insts) == (mode == "row")
    assert runs["row"][0] != pytest.approx(runs["none"][0], rel=1e-4)  # the same texts, other prompts


def test_a_run_with_single_pairs_embeds_each_question_beside_its_answer(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config, monkeypatch
):
    seen = []

    def spy(tokenizer, texts, instructions, **kwargs):
        seen.append(list(texts))
        return tokenize_texts(tokenizer, texts, instructions, **kwargs)

    monkeypatch.setattr(step, "tokenize_texts", spy)
    single = {"share": 1.0, "pairs": True}
    cfg = _config(run_config, tmp_path / "run", tiny_folder, tiny_teacher, targets, assets,
                  loss={"regress_weight": 1.0}, single=single, train={"max_steps": 2})  # fmt: skip
    train(cfg)
    mates = {}  # text -> the texts it shares a row with
    for line in (assets / "qa_pairs.jsonl").read_text().splitlines():
        row = json.loads(line)
        group = {row["query"], *row["pos"], *row["neg"]}
        for text in group:
            mates.setdefault(text, set()).update(group - {text})
    assert len(seen) == 2
    for texts in seen:  # each text's row-mate in the batch (the qa file's rows: a question and its passage)
        assert len(texts) == len(set(texts)) > 4 and all(mates[t] & set(texts) for t in texts)


def test_a_runs_file_order_reaches_both_streams_samplers(
    tmp_path, tiny_folder, tiny_teacher, targets, assets, run_config, monkeypatch
):
    from genembed.training.data import streams

    built = []

    class Recording(streams.MixtureSampler):
        def __init__(self, *args, even=False, **kwargs):
            built.append(even)
            super().__init__(*args, even=even, **kwargs)

    monkeypatch.setattr(streams, "MixtureSampler", Recording)
    cfg = _config(run_config, tmp_path / "run", tiny_folder, tiny_teacher, targets, assets,
                  loss={"regress_weight": 1.0}, single={"share": 0.5, "file_order": "even"},
                  train={"max_steps": 2})  # fmt: skip
    cfg.data.file_order = "even"
    train(cfg)
    assert built == [True, True]  # the contrastive stream's sampler, then the single texts'
    assert [r["objective"] for r in _records(tmp_path / "run")] == ["contrastive", "single"]
