"""Lever ablation (issue 20): one short training run per lever of the second campaign, each scored the same way.

The rows are the config files of ``experiments/configs/levers/``: ``control.yaml`` (the shipped adapter
continued with the first campaign's recipe at K=10 for 40 steps) and one file per lever holding only
what differs from it (``sym_cls``, ``reviews_axes``, ``reviews_heavy``, ``batch64``, ``doc128``, ``mined``,
``distill``, ``lora_r32``, ``full_ft``, ``joint_gen``, ``control_seed2`` (the control with another
seed), ``steps80`` and ``steps160`` (twice and four times the steps) and ``all`` of the levers
together). Each file's header says what its row tests. Per row: train (resuming), then
``genembed.eval.evaluate`` on the dev tasks at K=1, 5 and 10 from one encoding pass. What a row needs
is made first: hard negatives mined by the row's starting model for data files under ``--runs`` that
do not exist yet (``genembed mine-negatives`` on a seeded sample of
``--mine-limit`` rows of the training file of the same name), and the shipped adapter merged into the
backbone for rows whose ``model.name`` is ``--merged-base``. Every row is checked before anything runs.

Run from the repository root, on both cores with nothing else heavy beside it:

    .venv/bin/python experiments/lever_ablation.py                          # every lever, all dev rows
    .venv/bin/python experiments/lever_ablation.py --levers control sym_cls --limit 200

Writes ``experiments/results/lever_ablation.json`` (per row: the command, training seconds, final loss,
every task's scores at each K, the dev mean, the instruct tasks' axes) and beside it ``.md`` (the
table) and ``.png`` (dev mean vs K per row). Resumable: a finished row is neither retrained nor
re-encoded, an interrupted one continues from its checkpoint and the embedding cache.

Rows that differ by less than a point need the clustered tasks' k-means noise taken out: with
``--cluster-starts 20 --out <other.json>`` finished rows are re-scored from the embedding cache (no
training, no encoding) at the mean over 20 k-means starts.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
from pathlib import Path
from typing import Any

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
from _ablation import finished, load_model, load_trained, save_row, train_row
from _run_info import REPO, git_commit

LEVERS = REPO / "experiments" / "configs" / "levers"
SHARED = REPO.parent / "shared" / "data"
STEPS = [1, 5, 10]
MAIN_K = 5  # the table's column; K=1 and K=10 beside it


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levers", nargs="*", default=None, help="rows by config name (default: every file)")
    parser.add_argument("--configs", type=Path, default=LEVERS, help="folder of the lever configs")
    parser.add_argument("--tasks", nargs="*", type=Path, default=None, help="task folders (default: every dev task)")
    parser.add_argument("--limit", type=int, default=0, help="at most N rows per eval data file (0: all rows)")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "levers", help="one folder per row")
    parser.add_argument("--train-data", type=Path, default=SHARED / "train", help="sources of mined files")
    parser.add_argument("--mine-limit", type=int, default=500, help="rows sampled per mined file (0: all)")
    parser.add_argument("--merged-base", type=Path, default=REPO / "runs" / "levers" / "default-merged")
    parser.add_argument("--cache", type=Path, default=None, help="embedding cache (default: genembed's)")
    parser.add_argument("--dtype", default="float32", help="weights dtype at evaluation (the default's table: float32)")
    parser.add_argument("--center", action=argparse.BooleanOptionalAction, default=True, help="as the default")
    parser.add_argument(
        "--cluster-starts",
        type=int,
        default=1,
        help="clustering and instruct tasks: mean over N k-means starts (1: genembed eval's one start); a "
        "finished row is re-scored from the embedding cache, into eval_startsN.json in its folder",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the configs')")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every row")
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=REPORT",
        help="a `genembed eval` JSON report shown as a row beside the trained ones (e.g. the shipped default)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "lever_ablation.json")
    args = parser.parse_args(argv)
    if args.cluster_starts < 1:
        parser.error("--cluster-starts must be at least 1")

    order = {"control": 0, "all": 2}  # the control first, all the levers together last
    names = args.levers or sorted((p.stem for p in args.configs.glob("*.yaml")), key=lambda n: (order.get(n, 1), n))
    tasks = args.tasks or sorted(p for p in (SHARED / "dev").iterdir() if p.is_dir())
    rows = {name: _row(args, name) for name in names}  # every row checked before anything runs
    settings = {"tasks": [str(t) for t in tasks], "limit": args.limit, "steps": STEPS, "center": args.center}
    settings["dtype"] = args.dtype
    settings["cluster_starts"] = args.cluster_starts

    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results.setdefault("runs", {})
    results["info"] = {"git_commit": git_commit(), "eval": settings, "mine_limit": args.mine_limit}
    results.setdefault("references", {}).update(_reference(spec, settings) for spec in args.reference)
    # the table and plot are rewritten even when every row is done (new references, settings or layout)
    results = save_row(args.out, results, None, None, _markdown)
    _plot(results, args.out.with_suffix(".png"))
    for name, (config, overrides, cfg) in rows.items():
        folder = Path(cfg.train.output_dir)
        done = results["runs"].get(name, {})
        if done and _settings(done["eval_settings"]) == settings and (folder / "summary.json").is_file():
            print(f"{name}: done")
            continue
        _prepare(args, cfg, mine=not finished(folder))  # a finished row is only scored again
        entry = train_row(config, overrides)
        entry["eval_settings"] = settings
        entry |= _score(args, config, overrides, tasks, cfg)
        results = save_row(args.out, results, name, entry, _markdown)
        _plot(results, args.out.with_suffix(".png"))
    print(args.out.with_suffix(".md").read_text())
    return results


def _row(args: argparse.Namespace, name: str) -> tuple[Path, list[str], Any]:
    """A row's config file, overrides and loaded config; SystemExit naming what a row lacks."""
    from genembed.training import ConfigError, load_config

    config = args.configs / f"{name}.yaml"
    overrides = [f"train.output_dir={args.runs / name}", *args.set]
    overrides += [f"train.threads={args.threads}"] if args.threads else []
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        raise SystemExit(f"lever {name!r}: {exc}") from exc
    for item in cfg.data.files:
        path = Path(item.path)
        if not path.is_file() and not _to_mine(args, path):
            raise SystemExit(f"lever {name!r}: data file not found: {path}")
    for item in cfg.generative.files:
        if not Path(item.path).is_file():
            raise SystemExit(
                f"lever {name!r}: generative data not found: {item.path} (write it with genembed make-gen-data, "
                "see experiments/configs/gircse-smollm2-v2.yaml)"
            )
    return config, overrides, cfg


def _reference(spec: str, settings: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``NAME=REPORT``: a ``genembed eval`` JSON report as a row (its scores at the table's K), with the
    evaluation settings it shares with the table's or, where they differ, its own."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise SystemExit(f"--reference {spec!r}: expected NAME=REPORT.json")
    try:
        report = json.loads(Path(path).read_text())
        config, views = report["config"], [k for k in STEPS if k in report["config"]["steps"]]
        tasks = {t["name"]: [t["scores"][f"K={k}"] for k in views] for t in report["tasks"]}
        mean = [report["mean"]["scores"][f"K={k}"] for k in views]
        details = {t["name"]: t["details"][f"K={MAIN_K}"] for t in report["tasks"] if t["type"] == "instruct"}
        axes_of = {t["name"]: t["info"]["axes"] for t in report["tasks"] if t["type"] == "instruct"}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--reference {spec!r}: not a genembed eval report with K={STEPS}: {exc!r}") from exc
    if not views:
        raise SystemExit(f"--reference {spec!r}: the report has none of K={STEPS} (it has {config['steps']})")
    own = {"tasks": config["tasks"], "limit": config["limit"] or 0, "steps": views, "center": config["center"]}
    own["dtype"], own["cluster_starts"] = config["dtype"], config.get("cluster_starts", 1)
    same = [Path(t).name for t in own["tasks"]] == [Path(t).name for t in settings["tasks"]]
    same = same and all(own[k] == settings[k] for k in ("limit", "steps", "center", "dtype", "cluster_starts"))
    entry = {
        "command": f"genembed eval (report {path}, commit {config.get('git_commit', '?')[:12]})",
        "eval_settings": settings if same else own,
        "eval": {"views": views, "tasks": tasks},
        "mean": mean,
        "axes": {t: {a: _axis(d, a) for a in axes_of[t]} for t, d in details.items()},
        "train_seconds": None,  # not trained here
        "final_loss": None,
    }
    return name, entry


def _settings(eval_settings: dict[str, Any]) -> dict[str, Any]:
    """A row's evaluation settings in full; rows scored before ``cluster_starts`` existed used one start."""
    return {"cluster_starts": 1} | eval_settings


def _axis(details: dict[str, float], axis: str) -> dict[str, float | None]:
    """One label axis of an instruct task: V-measure under its own instruction and, averaged, the others'."""
    others = [v for k, v in details.items() if k.startswith(f"cross:{axis}<-")]
    return {"own": details[f"axis:{axis}"], "other": sum(others) / len(others) if others else None}


def _to_mine(args: argparse.Namespace, path: Path) -> bool:
    """Whether a data file is one this script mines: under ``--runs`` or the checkout's ``runs/`` (where the
    shipped configs put them, whatever ``--runs`` is), with a training file of its name."""
    made_here = any(path.resolve().is_relative_to(folder.resolve()) for folder in (args.runs, REPO / "runs"))
    return made_here and (args.train_data / path.name).is_file()


def _prepare(args: argparse.Namespace, cfg: Any, *, mine: bool = True) -> None:
    """Write what the row's config needs and this script makes: the merged base, mined data files
    (``mine=False``: none, for a row already trained; mined files present are still checked)."""
    merged = cfg.model.name is not None and Path(cfg.model.name).resolve() == args.merged_base.resolve()
    if merged and not (args.merged_base / "config.json").is_file():
        _merge_default(args, args.merged_base)
    model = None
    for item in (i for i in cfg.data.files if _to_mine(args, Path(i.path))):
        out, settings = Path(item.path), _mine_settings(args, cfg, item)
        if out.is_file():
            written = json.loads(_settings_file(out).read_text()) if _settings_file(out).is_file() else settings
            if written != settings:
                raise SystemExit(f"{out} was mined with {written}, this row needs {settings}: write it elsewhere")
            continue
        if not mine:
            continue
        model = model or _starting_model(cfg)
        _mine(out, settings, cfg, model)


def _starting_model(cfg: Any) -> Any:
    """The model a row starts from: its backbone with ``lora.init_from`` (the shipped adapter for ``default``)."""
    from genembed.models.adapters import adapter_folder, default_adapter

    init = cfg.lora.init_from
    adapter = None if init is None else default_adapter() if init == "default" else adapter_folder(init)
    return load_model(cfg.model, adapter)


def _merge_default(args: argparse.Namespace, out: Path) -> None:
    """Write the control's starting model (its backbone with its ``init_from`` adapter merged in) as an HF
    folder, the base of the rows that start a fresh adapter or train every weight from the same function."""
    import os
    import shutil
    import tempfile

    from genembed.training import load_config

    model = _starting_model(load_config(args.configs / "control.yaml"))
    network = model.backbone.model
    if hasattr(network, "merge_and_unload"):  # a peft model
        network = network.merge_and_unload()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-")
    try:
        network.save_pretrained(tmp, safe_serialization=True)
        model.backbone.tokenizer.save_pretrained(tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"merged base -> {out}")


def _mine_settings(args: argparse.Namespace, cfg: Any, item: Any) -> dict[str, Any]:
    """How a data file under ``--runs`` is mined for a row: its source, sample size, symmetry, K and lengths."""
    emb = cfg.embedding
    settings = {"source": str((args.train_data / Path(item.path).name).resolve()), "rows": args.mine_limit}
    settings |= {"symmetric": item.symmetric, "method": emb.method, "steps": emb.steps, "tau": emb.tau}
    settings |= {"query_max_length": emb.query_max_length, "doc_max_length": emb.doc_max_length}
    return settings | {"doc_instruction": cfg.data.doc_instruction}


def _settings_file(out: Path) -> Path:
    return out.with_name(f"{out.name}.settings.json")


def _mine(out: Path, settings: dict[str, Any], cfg: Any, model: Any) -> None:
    """Write ``out``: a seeded sample of the source's rows with negatives mined by ``model`` (their own
    dropped), and its settings beside it."""
    from genembed._files import atomic_write_text as atomic_write
    from genembed.training.mining import mine_negatives

    emb, source = cfg.embedding, Path(settings["source"])
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if settings["rows"] and len(lines) > settings["rows"]:
        lines = random.Random(0).sample(lines, settings["rows"])
    sample = out.with_name(f"{out.stem}.sample.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(sample, "\n".join(lines) + "\n")
    atomic_write(_settings_file(out), json.dumps(settings, indent=1))  # first: `out` is checked against it
    options = emb.settings()
    result = mine_negatives(
        model,
        [sample],
        out,
        symmetric=settings["symmetric"],
        doc_instruction=settings["doc_instruction"],
        options=options,
        query_max_length=emb.query_max_length,
        doc_max_length=emb.doc_max_length,
        keep_original=False,
        show_progress_bar=False,
    )
    print(f"mined {result.mined} negatives for {result.rows} rows (pool {result.pool}) -> {out}")


def _score(args: argparse.Namespace, config: Path, overrides: list[str], tasks: list[Path], cfg: Any) -> dict[str, Any]:
    """The row's scores: every task and the mean at each K, and each instruct task's axes at ``MAIN_K``."""
    import torch

    from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate

    if cfg.train.threads:  # as many threads as the row trained with
        torch.set_num_threads(cfg.train.threads)
    folder, method = Path(cfg.train.output_dir), cfg.embedding.method
    model = load_trained(config, folder, overrides, dtype=args.dtype)
    steps = STEPS if method == "gircse" else None
    encoder = GenembedEncoder(model, method=method, steps=steps, center=args.center)
    starts = args.cluster_starts
    report = evaluate(
        encoder,
        tasks,
        limit=args.limit or None,
        cache=EmbeddingCache(args.cache),
        out=folder / ("eval.json" if starts == 1 else f"eval_starts{starts}.json"),
        log=print,
        cluster_starts=starts,
    )
    at = report.views.index(MAIN_K) if MAIN_K in report.views else -1
    axes = {}
    for task in (t for t in report.tasks if t.type == "instruct"):
        details = task.details[at]
        axes[task.name] = {axis: _axis(details, axis) for axis in task.info["axes"]}
    return {
        "eval": {"views": report.views, "tasks": {t.name: t.scores for t in report.tasks}},
        "mean": report.mean_scores(),
        "axes": axes,
    }


def _at(entry: dict, k: int) -> float | None:
    views = entry["eval"]["views"]
    return entry["mean"][views.index(k)] if k in views else None


def _fmt(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _markdown(results: dict) -> str:
    info = _settings(results["info"]["eval"])
    rows = {**{f"{n} (reference)": r for n, r in results.get("references", {}).items()}, **results["runs"]}
    tasks = sorted({t for r in rows.values() for t in r["eval"]["tasks"]})
    axes = sorted({(t, a) for r in rows.values() for t, by in r["axes"].items() for a in by})
    control = _at(results["runs"]["control"], MAIN_K) if "control" in results["runs"] else None
    lines = [
        "# Lever ablation (experiments/lever_ablation.py)",
        "",
        f"Dev mean and task scores at K={MAIN_K}; "
        + (f"at most {info['limit']} rows per file; " if info["limit"] else "all rows; ")
        + ("centred embeddings (as genembed eval by default). " if info["center"] else "uncentred embeddings. ")
        + (
            f"Clustering and instruct tasks: mean V-measure over {info['cluster_starts']} k-means starts. "
            if info["cluster_starts"] > 1
            else ""
        )
        + f"Δ: the row's mean at K={MAIN_K} minus the control's. "
        "Axes: V-measure of the instruct task's label axis under that axis' own instruction "
        "(the other axes' instructions in brackets). Train (s): the sum of the optimizer steps' times. "
        "Reference rows are `genembed eval` reports of models not trained here.",
        "",
    ]
    head = ["row", "mean K=1", f"**mean K={MAIN_K}**", "Δ", "mean K=10", *[f"{t} {a}" for t, a in axes], *tasks]
    head += ["train (s)", "final loss"]
    lines += ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for name, r in rows.items():
        views = r["eval"]["views"]
        at = views.index(MAIN_K) if MAIN_K in views else -1
        main = _at(r, MAIN_K)
        delta = "-" if main is None or control is None else f"{main - control:+.2f}"
        cells = [_fmt(_at(r, 1)), f"**{_fmt(main)}**", delta, _fmt(_at(r, 10))]
        for task, axis in axes:
            score = r["axes"].get(task, {}).get(axis)
            cells.append(f"{_fmt(score['own'])} ({_fmt(score['other'])})" if score else "-")
        cells += [_fmt(r["eval"]["tasks"][t][at]) if t in r["eval"]["tasks"] else "-" for t in tasks]
        seconds = r["train_seconds"]
        cells += ["-" if seconds is None else f"{seconds:.0f}", _fmt(r["final_loss"])]
        flag = "" if _settings(r["eval_settings"]) == info else " (*)"
        lines.append(f"| {name}{flag} | " + " | ".join(cells) + " |")
    if any(_settings(r["eval_settings"]) != info for r in rows.values()):
        lines += ["", "(*) scored with other evaluation settings than the rest (see `eval_settings` in the JSON)."]
    lines += ["", "Commands (from the repository root):", ""]
    lines += [f"- {name}: `{r['command']}`" for name, r in rows.items()]
    return "\n".join(lines) + "\n"


def _plot(results: dict, path: Path) -> None:
    """PNG of the dev mean vs K, one line per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from genembed._files import atomic_write_text as atomic_write

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.get("references", {}).items():
        ax.plot(r["eval"]["views"], r["mean"], marker="s", linestyle="--", color="grey", label=f"{name} (reference)")
    for name, r in results["runs"].items():
        ax.plot(r["eval"]["views"], r["mean"], marker="o", label=name)
    ax.set_xlabel("K (soft tokens at test time)")
    ax.set_ylabel("dev mean")
    ax.set_title("Lever ablation: dev mean vs K")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write(path, buffer.getvalue())


if __name__ == "__main__":
    main()
