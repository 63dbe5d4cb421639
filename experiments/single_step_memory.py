"""Memory and time of a run's first single-text step, chunk by chunk, in the precision the overrides give.

Builds the run of a training config (its model, data and teacher targets; the run folder goes to a
temporary directory), takes the first single-text batch and runs that step as training does (the
cached-gradient path, ``train.grad_cache_chunk``), printing for every chunk the seconds it took and the
process's resident memory after it. Why: under CPU bf16 autocast the frozen weights are cast again at
every call and each copy is kept for the backward pass (docs/training.md, ``train.precision``).

    python experiments/single_step_memory.py configs/retrieval-stage-4.yaml \\
        train.precision=bf16 train.grad_cache_chunk=16
    python experiments/single_step_memory.py configs/retrieval-stage-4.yaml \\
        train.precision=fp32 train.grad_cache_chunk=16

Heavy (the real backbone, about 4 minutes in fp32 on two cores): run it alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any


def resident_gb() -> float:
    """The process's resident set size now, in GB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e9


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. train.precision=bf16")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from genembed.training import load_config, step
    from genembed.training.loop import _with_overrides
    from genembed.training.setup import build_run

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as out:
        cfg = _with_overrides(load_config(args.config), [*args.overrides, f"train.output_dir={out}/run"])
        run, _ = build_run(cfg, resume=False)
        if run.single is None:
            raise SystemExit(f"{args.config}: no single-text steps (single.share is 0)")
        embed = run.objective.embed
        chunks: list[dict[str, Any]] = []

        def timed_embed(part: Any) -> Any:
            start = time.perf_counter()
            z = embed(part)
            chunks.append(
                {
                    "shape": tuple(part.input_ids.shape),
                    "grad": torch.is_grad_enabled(),
                    "seconds": time.perf_counter() - start,
                    "resident_gb": resident_gb(),
                }
            )
            c = chunks[-1]
            print(
                f"chunk {c['shape']} {'with' if c['grad'] else 'without'} gradients: {c['seconds']:.1f} s, "
                f"resident {c['resident_gb']:.1f} GB",
                flush=True,
            )
            return z

        run.objective.embed = timed_embed
        start = time.perf_counter()
        step._single_micro_step(run, True, None)
        total = time.perf_counter() - start
        without = sum(c["seconds"] for c in chunks if not c["grad"])
        print(
            f"{run.precision}: step {total:.1f} s (forward passes without gradients {without:.1f} s), "
            f"peak resident {peak_gb():.1f} GB"
        )


if __name__ == "__main__":
    main()
