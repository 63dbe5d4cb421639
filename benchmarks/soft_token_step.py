"""What one GIRCSE soft-token step costs on the CPU fast path, against a one-token forward.

A step feeds one soft token per row through the stack (its KV cache written in place) and, before it,
turns the previous hidden state into that soft token: the vocabulary projection ``lm_head(h)``, a softmax
over the vocabulary and ``p @ E``. Both are single-row-per-text work, so their cost is set by the batch's
rows. This script times, for each batch size and thread count, interleaved round by round (best round
kept; the machine is shared):

- ``step``: :meth:`FastDecoder.step` after a prefill of sentence prompts (stsb-dev, chat format);
- ``soft_embedding``: ``lm_head``, softmax and ``p @ E`` as the fast path runs them;
- ``one_token_forward``: a plain forward of one token per row through the stack (no cache, no head):
  the arithmetic floor of the step's stack part;

and reports ``step / one_token_forward`` and ``(step + soft_embedding) / one_token_forward``, the
per-row cost of a step, and a torch.profiler table of one batch size (ops by self time), which shows
what is not arithmetic. Run (about 3 minutes on 2 cores; under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/soft_token_step.py \\
        --batches 32,128 --threads 1,2 --out benchmarks/results/soft_token_step

Writes ``OUT.json`` (config, git commit, timings) and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _run_info import REPO, git_commit

STSB = REPO.parent / "shared" / "data" / "dev" / "stsb-dev" / "pairs.jsonl"


def sentences(n: int) -> list[str]:
    """The first ``n`` distinct stsb-dev sentences (else a bundled calibration text repeated)."""
    if STSB.is_file():
        seen: dict[str, None] = {}
        for line in STSB.read_text().splitlines():
            pair = json.loads(line)
            seen.update(dict.fromkeys((pair["s1"], pair["s2"])))
            if len(seen) >= n:
                return list(seen)[:n]
    from genembed.encoders.centering import calibration_texts

    texts = list(calibration_texts())
    return [texts[i % len(texts)] for i in range(n)]


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(model, batch_size: int, rounds: int, steps_room: int = 64, only_steps: bool = False) -> dict:
    from genembed.encoders import collate
    from genembed.encoders.fast_decoder import FastDecoder, right_pad
    from genembed.encoders.soft_tokens import output_head

    backbone = model.backbone
    settings = model.embed_settings()
    prompts = settings.prompts(backbone.tokenizer, sentences(batch_size), "")
    batch = collate(prompts, backbone.tokenizer.pad_token_id)
    fast = FastDecoder.build(backbone.model)
    ids, lengths = right_pad(batch.input_ids, batch.attention_mask)
    h_0, cache = fast.prefill(ids, lengths, cache_steps=steps_room)
    head, _ = output_head(backbone.model)
    soft_embedding = fast.soft_embedding_fn(head, settings.tau)
    d = soft_embedding(h_0)[1]
    one_token = torch.full((batch_size, 1), int(ids[0, 0]))
    ones = torch.ones(batch_size, dtype=torch.long)

    def step() -> None:
        if cache.filled >= cache.key_mask.shape[-1]:
            cache.filled = cache.prompt_width  # reuse the room: the same work every round
        fast.step(d, cache)

    out = {"batch": batch_size, "prompt_tokens": int(lengths.sum()), "width": int(ids.shape[1])}
    if only_steps:  # what the profiler sees: the K steps' work only
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(rounds):
                step()
                soft_embedding(h_0)
        return {"table": prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)}
    for name, fn in (
        ("step", step),
        ("soft_embedding", lambda: soft_embedding(h_0)),
        ("one_token_forward", lambda: fast.prefill(one_token, ones)),
    ):
        fn()  # warm up
        out[name] = best(fn, rounds)
    out["step_over_one_token"] = out["step"] / out["one_token_forward"]
    out["full_step_over_one_token"] = (out["step"] + out["soft_embedding"]) / out["one_token_forward"]
    out["ms_per_row_step"] = 1e3 * (out["step"] + out["soft_embedding"]) / batch_size
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="32,128", help="rows per step, comma-separated")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile-batch", type=int, default=32, help="batch size of the profiler table")
    parser.add_argument("--out", type=Path, required=True, help="output path without extension")
    args = parser.parse_args()

    import genembed

    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    model = genembed.load(dtype="float32")
    rows = []
    with torch.inference_mode():
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            for batch_size in batches:
                rows.append({"threads": n_threads, **measure(model, batch_size, args.rounds)})
                print(json.dumps(rows[-1]), flush=True)
        torch.set_num_threads(threads[0])
        table = measure(model, args.profile_batch, args.rounds, only_steps=True)["table"]
    result = {
        "config": vars(args) | {"out": str(args.out)},
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "rows": rows,
        "profile": {"batch": args.profile_batch, "threads": threads[0], "table": table},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [
        "| threads | batch | step (s) | lm_head + softmax + p@E (s) | one-token forward (s) | step / one-token "
        "| (step + head) / one-token | ms per row and step |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['threads']} | {r['batch']} | {r['step']:.3f} | {r['soft_embedding']:.3f} | "
            f"{r['one_token_forward']:.3f} | {r['step_over_one_token']:.2f} | {r['full_step_over_one_token']:.2f} | "
            f"{r['ms_per_row_step']:.2f} |"
        )
    lines += [
        "",
        f"Profile of {args.rounds} steps (with their soft embeddings) at batch {args.profile_batch}, "
        f"{threads[0]} thread(s):",
        "",
        "```",
        table,
        "```",
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
