"""Loading and validating task folders: every type, the --limit rules, and errors naming file/line/field."""

from __future__ import annotations

import json

import pytest

from genembed.eval.tasks import TaskFormatError, find_task_dirs, load_task


def test_every_type_loads(toy_tasks):
    tasks = {t.name: t for t in (load_task(p) for p in find_task_dirs([toy_tasks]))}
    assert sorted(tasks) == [
        f"toy-{k}" for k in sorted(["sts", "pair", "classification", "clustering", "retrieval", "instruct"])
    ]
    assert tasks["toy-sts"].data.targets[:2] == [4.5, 4.0]
    assert tasks["toy-pair"].data.targets == [1.0, 1.0, 1.0, 0.0, 0.0]
    retrieval = tasks["toy-retrieval"].data
    # title + " " + text when the title is non-empty, the bare text otherwise
    assert retrieval.doc_texts[:2] == ["Cats a cat sleeps all day", "dogs run in the park"]
    assert retrieval.qrels["q3"] == {"d4": 1.0, "d2": 1.0}
    assert tasks["toy-retrieval"].doc_instruction == ""
    instruct = tasks["toy-instruct"]
    assert list(instruct.instructions) == ["sentiment", "domain"]
    assert instruct.data.labels["domain"][:2] == ["movie", "phone"]


def test_find_task_dirs_accepts_tasks_and_folders_of_tasks(toy_tasks, tmp_path):
    assert find_task_dirs([toy_tasks / "toy-sts"]) == [toy_tasks / "toy-sts"]
    assert len(find_task_dirs([toy_tasks])) == 6
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskFormatError, match="holds no task.json"):
        find_task_dirs([tmp_path / "empty"])
    with pytest.raises(TaskFormatError, match="not a folder"):
        find_task_dirs([tmp_path / "nope"])


@pytest.mark.parametrize(
    ("meta", "rows", "message"),
    [
        (
            {"type": "sts", "metric": "spearman"},
            [{"s1": "a", "s2": "b", "score": "high"}],
            r"pairs.jsonl:1: field 'score' must be a finite number",
        ),
        (
            {"type": "sts", "metric": "spearman"},
            [{"s1": "a", "s2": "b", "score": 1}, {"s1": "a", "score": 2}],
            r"pairs.jsonl:2: missing field 's2'",
        ),
        (
            {"type": "sts", "metric": "spearman"},
            [{"s1": "a", "s2": 3, "score": 1}],
            r"pairs.jsonl:1: field 's2' must be a string",
        ),
        ({"type": "sts", "metric": "ndcg@10"}, [], r"task.json: field 'metric' of a sts task must be 'spearman'"),
        ({"type": "regression", "metric": "r2"}, [], r"task.json: field 'type' must be one of"),
        (
            {"type": "pair", "metric": "ap"},
            [{"s1": "a", "s2": "b", "label": 2}],
            r"pairs.jsonl:1: field 'label' must be 0 or 1",
        ),
        (
            {"type": "pair", "metric": "ap"},
            [{"s1": "a", "s2": "b", "label": True}],
            r"pairs.jsonl:1: field 'label' must be a finite number",
        ),
        ({"type": "pair", "metric": "ap"}, [{"s1": "a", "s2": "b", "label": 0}], r"at least one pair with label 1"),
    ],
)
def test_pair_file_errors_name_file_line_and_field(tmp_path, make_task, meta, rows, message):
    folder = make_task(tmp_path, "t", meta, {"pairs.jsonl": rows} if rows else {})
    with pytest.raises(TaskFormatError, match=message):
        load_task(folder)


def test_json_errors_and_blank_lines(tmp_path, make_task):
    folder = make_task(
        tmp_path,
        "t",
        {"type": "clustering", "metric": "v_measure"},
        {"data.jsonl": '{"text": "a", "label": 1}\n\n{"text": "b", "label": "x"\n'},
    )
    with pytest.raises(TaskFormatError, match=r"data.jsonl:3: not valid JSON"):
        load_task(folder)
    (folder / "data.jsonl").write_text('{"text": "a", "label": 1}\n\n  \n{"text": "b", "label": "x"}\n')
    task = load_task(folder)
    assert task.data.labels == ["1", "x"]  # integer labels are used as strings
    (folder / "task.json").write_text("{not json")
    with pytest.raises(TaskFormatError, match=r"task.json: not valid JSON"):
        load_task(folder)
    (folder / "task.json").write_text(json.dumps({"type": "clustering", "metric": "v_measure"}))
    with pytest.raises(TaskFormatError, match=r"task.json: missing field 'name'"):
        load_task(folder)


def test_retrieval_errors_and_warnings(tmp_path, make_task):
    meta = {"type": "retrieval", "metric": "ndcg@10"}
    corpus = [{"id": "d1", "title": "", "text": "x"}, {"id": "d2", "title": "", "text": "y"}]
    queries = [{"id": "q1", "text": "x"}, {"id": "q2", "text": "z"}]
    folder = make_task(
        tmp_path,
        "t",
        meta,
        {"corpus.jsonl": corpus, "queries.jsonl": queries, "qrels.tsv": "query-id\tcorpus-id\tscore\n"},
    )
    with pytest.raises(TaskFormatError, match=r"qrels.tsv:1: gain 'score' is not a number \(qrels.tsv has no header"):
        load_task(folder)
    (folder / "qrels.tsv").write_text("q1 d1 1\n")
    with pytest.raises(TaskFormatError, match=r"qrels.tsv:1: expected qid<TAB>docid<TAB>gain, got 1 columns"):
        load_task(folder)
    (folder / "qrels.tsv").write_text("q1\td1\t1\nq1\td1\t2\n")
    with pytest.raises(TaskFormatError, match=r"qrels.tsv:2: duplicate judgement"):
        load_task(folder)
    (folder / "qrels.tsv").write_text("q1\td1\t1\nq1\td9\t2\nq7\td2\t1\n")
    task = load_task(folder)
    assert task.data.query_ids == ["q1"]  # q2 has no relevant document: not scored
    assert task.data.qrels["q1"] == {"d1": 1.0, "d9": 2.0}  # d9 is not in the corpus but stays in the ideal DCG
    warnings = " ".join(task.data.warnings)
    assert "1 query ids not in queries.jsonl" in warnings
    assert "1 judged document ids are not in corpus.jsonl" in warnings
    assert "1 queries have no relevant document" in warnings
    (folder / "corpus.jsonl").write_text(json.dumps(corpus[0]) + "\n" + json.dumps(corpus[0]) + "\n")
    with pytest.raises(TaskFormatError, match=r"corpus.jsonl:2: duplicate id 'd1'"):
        load_task(folder)


def test_instruct_errors(tmp_path, make_task):
    meta = {"type": "instruct", "metric": "v_measure_instructed", "instructions": {"a": "A?", "b": "B?"}}
    folder = make_task(tmp_path, "t", meta, {"data.jsonl": [{"text": "x", "labels": {"a": "1"}}]})
    with pytest.raises(TaskFormatError, match=r"data.jsonl:1: field 'labels' lacks axis 'b'"):
        load_task(folder)
    (folder / "data.jsonl").write_text(json.dumps({"text": "x", "labels": {"a": "1", "b": "2", "c": "3"}}) + "\n")
    with pytest.raises(TaskFormatError, match=r"data.jsonl:1: field 'labels' has axis 'c'"):
        load_task(folder)
    meta["instructions"] = {}
    (folder / "task.json").write_text(json.dumps({"name": "t", "instruction": "", **meta}))
    with pytest.raises(TaskFormatError, match=r"'instructions' must map at least one axis"):
        load_task(folder)


def test_limit_rules(toy_tasks, tmp_path, make_task):
    # classification: training rows round-robin over labels (the file is sorted by label)
    train = [{"text": f"{lab}{i}", "label": lab} for lab in "abc" for i in range(4)]
    folder = make_task(
        tmp_path, "c", {"type": "classification", "metric": "accuracy"}, {"train.jsonl": train, "test.jsonl": train}
    )
    task = load_task(folder, limit=5)
    assert task.data.train_texts == ["a0", "a1", "b0", "b1", "c0"]
    assert len(task.data.test_texts) == 5
    # retrieval: the first N scored queries, their judged documents, and the first N other documents
    task = load_task(toy_tasks / "toy-retrieval", limit=1)
    assert task.data.query_ids == ["q1"]
    assert task.data.doc_ids == ["d1", "d2"]
    # other types: the first N rows
    assert len(load_task(toy_tasks / "toy-sts", limit=2).data.s1) == 2
    with pytest.raises(ValueError, match="limit must be >= 1"):
        load_task(toy_tasks / "toy-sts", limit=0)


def test_classification_needs_two_labels(tmp_path, make_task):
    rows = [{"text": "a", "label": "x"}]
    folder = make_task(
        tmp_path, "c", {"type": "classification", "metric": "accuracy"}, {"train.jsonl": rows, "test.jsonl": rows}
    )
    with pytest.raises(TaskFormatError, match=r"train.jsonl: needs at least two labels"):
        load_task(folder)


def test_dev_tasks_load(shared_data):
    tasks = {t.name: t for t in (load_task(p) for p in find_task_dirs([shared_data / "dev"]))}
    assert len(tasks) == 12
    retrieval = {name for name, t in tasks.items() if t.type == "retrieval"}
    assert retrieval == {"arguana-dev", "cfmed-dev", "checkthat-dev", "cosqa-dev", "scifact-dev"}
    sizes = {name: (len(tasks[name].data.query_ids), len(tasks[name].data.doc_ids)) for name in retrieval}
    assert sizes["arguana-dev"] == (200, 2188)
    assert sizes["checkthat-dev"] == (197, 3000)
    assert sizes["cosqa-dev"] == (200, 3000)
    assert sizes["cfmed-dev"] == (100, 1239)
    assert sum(len(j) for j in tasks["cfmed-dev"].data.qrels.values()) == 4819
    assert max(g for j in tasks["cfmed-dev"].data.qrels.values() for g in j.values()) == 8
    scifact = tasks["scifact-dev"].data
    assert (len(scifact.query_ids), len(scifact.doc_ids)) == (100, 1611)
    assert sum(len(j) for j in scifact.qrels.values()) == 117
    assert not scifact.warnings
    assert len(tasks["stsb-dev"].data.s1) == 1497
    assert len(set(tasks["banking77-dev"].data.train_labels)) == 77
