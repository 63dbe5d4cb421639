"""experiments/lever_ablation.py end to end on the tiny random model: rows from lever configs, resumable."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parents[2] / "tests" / "assets" / "training"


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("lever_ablation")


@pytest.fixture
def start_adapter(tiny, tmp_path) -> Path:
    """A LoRA adapter (r=4) on the tiny model with random weights: what the control continues."""
    import torch

    from genembed.training.lora import add_lora

    model = add_lora(tiny.model, r=4, alpha=8, dropout=0.0)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    model.save_pretrained(tmp_path / "start")
    return tmp_path / "start"


def _levers(folder: Path, runs: Path, start: Path) -> Path:
    """A control continuing ``start`` on the tiny model, a fresh r=8 adapter on the control's starting model
    merged into one folder, and the control on negatives that starting model mined."""
    folder.mkdir()
    (folder / "control.yaml").write_text(
        f"""
model: {{name: tiny}}
lora: {{dropout: 0.0, init_from: {start}}}
embedding: {{steps: 2, query_max_length: 96, doc_max_length: 96}}
data:
  files: [{{path: {ASSETS / "similar.jsonl"}, symmetric: true}}, {ASSETS / "qa_pairs.jsonl"}]
  batch_size: 4
train: {{max_steps: 2, lr: 1.0e-3, save_every: 1, seed: 0, progress: false, output_dir: {runs / "control"}}}
"""
    )
    (folder / "rank8.yaml").write_text(
        f"base: control.yaml\nmodel: {{name: {runs / 'merged'}}}\nlora: {{r: 8, alpha: 16, init_from: null}}\n"
    )
    (folder / "mined.yaml").write_text(
        f"base: control.yaml\ndata:\n  files: [{{path: {runs / 'mined' / 'qa_pairs.jsonl'}, weight: 20}}]\n"
    )
    return folder


def test_rows_are_trained_scored_and_not_redone(script, toy_tasks, start_adapter, tmp_path, monkeypatch):
    import genembed
    from genembed.training import load_config

    runs, out = tmp_path / "runs", tmp_path / "results" / "levers.json"
    levers = _levers(tmp_path / "levers", runs, start_adapter)
    argv = ["--configs", str(levers), "--tasks", str(toy_tasks / "toy-sts"), str(toy_tasks / "toy-instruct")]
    argv += ["--runs", str(runs), "--train-data", str(ASSETS), "--mine-limit", "12", "--merged-base"]
    argv += [str(runs / "merged"), "--cache", str(tmp_path / "cache.sqlite"), "--dtype", "float32"]
    argv += ["--threads", "1", "--out", str(out)]
    results = script.main(argv)

    runs_json = json.loads(out.read_text())["runs"]
    assert runs_json == results["runs"] and set(runs_json) == {"control", "mined", "rank8"}
    for name, row in runs_json.items():
        assert row["eval"]["views"] == [1, 5, 10]
        assert set(row["eval"]["tasks"]) == {"toy-sts", "toy-instruct"}
        numbers = [*row["mean"], *sum(row["eval"]["tasks"].values(), []), row["train_seconds"], row["final_loss"]]
        assert all(math.isfinite(x) for x in numbers)
        # the dev mean is the mean of the tasks' scores at each K
        for i in range(3):
            assert row["mean"][i] == pytest.approx(sum(s[i] for s in row["eval"]["tasks"].values()) / 2)
        axes = row["axes"]["toy-instruct"]
        assert set(axes) == {"sentiment", "domain"} and all(math.isfinite(a["own"]) for a in axes.values())
        assert row["command"] == (
            f"genembed train {(levers / name).resolve()}.yaml train.output_dir={runs / name} train.threads=1"
        )
        assert len((runs / name / "metrics.jsonl").read_text().splitlines()) == 2
    # the rank row trained a fresh r=8 adapter on the control's starting model written as a folder
    assert json.loads((runs / "rank8" / "adapter_config.json").read_text())["r"] == 8
    tiny = load_config(levers / "control.yaml").model
    start, raw = script.load_model(tiny, start_adapter), script.load_model(tiny, None)
    merged = genembed.load(runs / "merged", adapter=False, dtype="float32")
    texts = ["a cat sleeps", "tax law is complex"]
    assert merged.encode(texts, steps=2) == pytest.approx(start.encode(texts, steps=2), abs=1e-5)
    assert raw.encode(texts, steps=2) != pytest.approx(start.encode(texts, steps=2), abs=1e-3)
    # the mined row trained on a sample of the training file with negatives the model mined
    mined = [json.loads(line) for line in (runs / "mined" / "qa_pairs.jsonl").read_text().splitlines()]
    pool = {text for row in mined for text in row["pos"]}  # qa_pairs rows have no negatives of their own
    assert len(mined) == 12 and any(row["neg"] for row in mined)
    assert all(set(row["neg"]) <= pool - set(row["pos"]) for row in mined)
    assert json.loads((runs / "mined" / "qa_pairs.jsonl.settings.json").read_text())["steps"] == 2

    md = out.with_suffix(".md").read_text()
    for name, row in runs_json.items():
        line = next(x for x in md.splitlines() if x.startswith(f"| {name} |"))
        assert f"**{row['mean'][1]:.2f}**" in line and f"{row['final_loss']:.2f}" in line
        assert f"- {name}: `{row['command']}`" in md
    assert "toy-instruct sentiment" in md.splitlines()[4]
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"

    def fail(*args, **kwargs):
        raise AssertionError("a finished row was trained or scored again")

    monkeypatch.setattr(script, "train_row", fail)
    monkeypatch.setattr(script, "load_trained", fail)
    assert script.main(argv)["runs"] == runs_json
    assert out.with_suffix(".md").read_text() == md
    # rows written before cluster_starts existed were scored with one start: still done
    legacy = json.loads(out.read_text())
    for row in legacy["runs"].values():
        del row["eval_settings"]["cluster_starts"]
    out.write_text(json.dumps(legacy))
    assert set(script.main(argv)["runs"]) == set(runs_json)
    monkeypatch.undo()

    # re-scored at the mean over 3 k-means starts: from the cache, without training
    import genembed.training

    monkeypatch.setattr(genembed.training, "train", fail)
    monkeypatch.setattr(script, "_mine", fail)  # nothing is mined again for a finished row
    (runs / "mined" / "qa_pairs.jsonl").rename(runs / "mined" / "qa_pairs.jsonl.kept")
    starts_out = tmp_path / "results" / "starts.json"
    rescored = script.main([*argv[:-1], str(starts_out), "--cluster-starts", "3"])["runs"]
    for name, row in rescored.items():
        report = json.loads((runs / name / "eval_starts3.json").read_text())
        assert report["config"]["cluster_starts"] == 3 and row["eval_settings"]["cluster_starts"] == 3
        assert all(t["encoding"]["encoded"] == 0 for t in report["tasks"])
        assert row["eval"]["tasks"]["toy-sts"] == runs_json[name]["eval"]["tasks"]["toy-sts"]  # not clustered
        assert row["train_seconds"] == runs_json[name]["train_seconds"]
    assert "mean V-measure over 3 k-means starts" in starts_out.with_suffix(".md").read_text()
    assert json.loads((runs / "control" / "eval.json").read_text())["config"]["cluster_starts"] == 1  # kept
    with pytest.raises(SystemExit):
        script.main([*argv, "--cluster-starts", "0"])
    # a mined file is not reused for a row that would mine it otherwise
    monkeypatch.undo()
    (runs / "mined" / "qa_pairs.jsonl.kept").rename(runs / "mined" / "qa_pairs.jsonl")
    with pytest.raises(SystemExit, match=r"qa_pairs.jsonl was mined with .*'rows': 12.* this row needs .*'rows': 10"):
        script.main([*argv, "--levers", "mined", "--mine-limit", "10", "--limit", "3"])


def test_a_row_missing_its_data_stops_before_anything_runs(script, tmp_path):
    levers = tmp_path / "levers"
    levers.mkdir()
    (levers / "gen.yaml").write_text(
        f"model: {{name: tiny}}\ndata: {{files: [{ASSETS / 'similar.jsonl'}]}}\n"
        f"generative: {{files: [{tmp_path / 'selfgen.jsonl'}]}}\n"
    )
    (levers / "nodata.yaml").write_text(f"model: {{name: tiny}}\ndata: {{files: [{tmp_path / 'nope.jsonl'}]}}\n")
    argv = ["--configs", str(levers), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "x.json")]
    with pytest.raises(SystemExit, match=r"lever 'gen': generative data not found: .*selfgen.jsonl.*make-gen-data"):
        script.main([*argv, "--levers", "gen"])
    with pytest.raises(SystemExit, match=r"lever 'nodata': data file not found: .*nope.jsonl"):
        script.main([*argv, "--levers", "nodata", "gen"])
    assert not (tmp_path / "runs").exists()


def test_mined_files_of_the_shipped_configs_are_found_whatever_runs_is(script, tmp_path):
    """mined.yaml and all.yaml name their mined files under the checkout's runs/; a runner given another
    --runs folder must still mine them there rather than stop at "data file not found"."""
    import argparse

    args = argparse.Namespace(runs=tmp_path / "elsewhere", train_data=script.SHARED / "train")
    if not (args.train_data / "snli.jsonl").is_file():
        pytest.skip("../shared/data/train is not here")
    assert script._to_mine(args, script.REPO / "runs" / "levers" / "mined" / "snli.jsonl")
    assert script._to_mine(args, tmp_path / "elsewhere" / "mined" / "snli.jsonl")
    assert not script._to_mine(args, tmp_path / "other" / "snli.jsonl")  # a data file elsewhere: must exist
    assert not script._to_mine(args, script.REPO / "runs" / "levers" / "mined" / "no_such_source.jsonl")


def test_gircse_ablations_share_the_row_code(toy_tasks, tmp_path, monkeypatch):
    """experiments/gircse_ablations.py trains and merges its rows with the same module."""
    gircse = importlib.import_module("gircse_ablations")
    out = tmp_path / "ablations.json"
    argv = ["gircse_ablations.py", "--config", str(gircse.REPO / "configs" / "tiny-gircse.yaml"), "--steps", "2"]
    argv += ["--warmup", "0", "--tasks", str(toy_tasks / "toy-sts"), "--variants", "mean", "full"]
    argv += ["--runs", str(tmp_path / "runs"), "--out", str(out)]
    monkeypatch.setattr("sys.argv", argv)
    monkeypatch.setenv("GENEMBED_CACHE", str(tmp_path / "cache"))
    gircse.main()
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"mean", "full"}
    assert runs["full"]["eval"]["views"] == [1, 5] and runs["mean"]["eval"]["views"] == [None]
    assert runs["mean"]["overrides"][-1] == "embedding.method=mean"
    assert all(math.isfinite(r["final_loss"]) and r["train_seconds"] > 0 for r in runs.values())
    assert "| full |" in out.with_suffix(".md").read_text()


def test_a_genembed_eval_report_is_a_reference_row(script, toy_tasks, tiny_model, tmp_path):
    from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate

    tasks = [toy_tasks / "toy-sts", toy_tasks / "toy-instruct"]
    encoder = GenembedEncoder(tiny_model, method="gircse", steps=[1, 3, 5, 10], center=True)
    report_path = tmp_path / "shipped.json"
    report = evaluate(encoder, tasks, cache=EmbeddingCache(tmp_path / "cache.sqlite"), out=report_path)
    levers, out = tmp_path / "levers", tmp_path / "results" / "levers.json"
    levers.mkdir()  # no rows to train: the table holds the reference only
    argv = ["--configs", str(levers), "--tasks", *map(str, tasks), "--out", str(out), "--dtype", "float32"]
    results = script.main([*argv, "--reference", f"shipped={report_path}"])

    row = results["references"]["shipped"]
    assert row["eval"]["views"] == [1, 5, 10]
    scores = {t.name: t.scores for t in report.tasks}  # report views are K=1, 3, 5, 10
    assert row["eval"]["tasks"] == {name: [s[0], s[2], s[3]] for name, s in scores.items()}
    assert row["mean"] == pytest.approx([report.mean_scores()[i] for i in (0, 2, 3)])
    instruct = next(t for t in report.tasks if t.type == "instruct").details[2]
    assert row["axes"]["toy-instruct"]["domain"] == {
        "own": instruct["axis:domain"],
        "other": instruct["cross:domain<-sentiment"],
    }
    assert row["eval_settings"] == results["info"]["eval"]  # same tasks, K, centring and dtype: no flag
    md = out.with_suffix(".md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| shipped (reference) |"))
    assert f"**{row['mean'][1]:.2f}** | - |" in line  # no control row: no delta
    assert line.endswith("| - | - |")  # not trained here: no training time, no loss
    assert json.loads(out.read_text())["references"] == results["references"]
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    # a reference kept from an earlier run survives a run without --reference
    assert script.main(argv)["references"] == results["references"]

    with pytest.raises(SystemExit, match=r"--reference 'shipped': expected NAME=REPORT.json"):
        script.main([*argv, "--reference", "shipped"])
    with pytest.raises(SystemExit, match=r"--reference 'x=.*nope.json': not a genembed eval report"):
        script.main([*argv, "--reference", f"x={tmp_path / 'nope.json'}"])


def test_every_shipped_lever_config_loads_with_its_data(script):
    """The real rows: each file in experiments/configs/levers loads, writes to its own folder, trains on
    files that exist (those the runner or make-gen-data writes under runs/ aside) and differs from the
    control."""
    import dataclasses

    from genembed.training import load_config

    shared = script.SHARED / "train"
    if not shared.is_dir():
        pytest.skip("../shared/data/train is not here")
    configs = sorted(script.LEVERS.glob("*.yaml"))
    rows = {p.stem for p in configs}
    assert {
        "control",
        "control_seed2",
        "steps80",
        "steps160",
        "reviews_axes",
        "reviews_heavy",
        "joint_gen",
        "all",
    } <= rows
    control = load_config(script.LEVERS / "control.yaml")
    for path in configs:
        cfg = load_config(path)
        assert Path(cfg.train.output_dir).name == path.stem, path.name
        for item in [*cfg.data.files, *cfg.generative.files]:
            made_here = "runs" in Path(item.path).parts
            assert made_here or Path(item.path).is_file(), f"{path.name}: {item.path}"
        if path.stem != "control":  # a lever changes something besides where the run is written
            same_folder = dataclasses.replace(cfg.train, output_dir=control.train.output_dir)
            assert dataclasses.replace(cfg, train=same_folder) != control, path.name
    heavy = load_config(script.LEVERS / "reviews_heavy.yaml").data.files
    assert [f.weight for f in heavy if Path(f.path).name == "reviews.jsonl"] == [26000]
