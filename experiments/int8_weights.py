"""int8 weights for CPU inference: the decoder layers' linear projections as dynamically quantized linears.

Each ``nn.Linear`` of the decoder layers (attention q/k/v/o and the MLP's gate and up projections) becomes an
:class:`Int8Linear`: its weight is quantized once, per output channel, symmetric int8; each call quantizes
its input per tensor (dynamic quantization) and runs PyTorch's quantized GEMM (fbgemm/oneDNN through the
``x86`` engine), which on CPUs without bfloat16 kernels does the same products as float32 in less time.
A LoRA adapter stays as it is: its projections wrap the quantized base layer and still switch off
(``disable_adapter()``), so generation with the base weights works as before. The embeddings, the
LM head, the norms and the MLP's down projections stay in float32: the down projection's inputs hold the
large outlier activations of LLMs, which one per-tensor input scale cannot carry (quantizing it too took
the default model's embeddings to cosine 0.83 with float32's on stsb-dev sentences; without it 0.96).

Not offered by ``genembed.load``: on this machine's CPU (AMD EPYC, AVX2, no VNNI, so 7-bit inputs) it
encoded 1.33x faster but lost 0.51 Spearman on sick-trial, over the 0.3 issue 53 allows
(docs/performance.md). This script repeats that check, float32 against int8, K=5, one thread
(about 8 minutes on 2 cores; under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python experiments/int8_weights.py \
        ../shared/data/dev/sick-trial ../shared/data/dev/stsb-dev --limit 500 \
        --out experiments/results/int8_weights.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from genembed.backbone.attention import decoder_stack

__all__ = ["FLOAT32_PROJECTIONS", "Int8Linear", "quantize_int8"]

FLOAT32_PROJECTIONS = ("down_proj",)  # kept in float32 (see the module docstring)


def _reduce_range() -> bool:
    """Quantize inputs to 7 bits where the CPU has no VNNI: AVX2's int8 products saturate at 16 bits."""
    return not any(flag in _cpu_flags() for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


class Int8Linear(torch.nn.Module):
    """A float32 ``nn.Linear`` with its weight in int8 (per-channel scales) and its input quantized per call.

    The int8 weight and its scales are buffers, so they are in the state dict (and in the digests of the
    weights that caches key by).
    """

    def __init__(self, linear: torch.nn.Linear, *, reduce_range: bool | None = None):
        super().__init__()
        weight = linear.weight.detach().float()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        scale = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12)  # (out,)
        zero = torch.zeros(self.out_features, dtype=torch.long)
        quantized = torch.quantize_per_channel(weight, scale.double(), zero, 0, torch.qint8)
        self.register_buffer("weight_int8", quantized.int_repr())
        self.register_buffer("weight_scale", scale)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self._packed = torch.ops.quantized.linear_prepack(quantized, bias)
        self.reduce_range = _reduce_range() if reduce_range is None else reduce_range

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.quantized.linear_dynamic(flat.float().contiguous(), self._packed, self.reduce_range)
        return out.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_int8(model: Any) -> int:
    """Replace the decoder layers' ``nn.Linear`` projections of ``model`` (a causal LM or peft wrapper) by
    :class:`Int8Linear`, in place; a LoRA projection keeps its adapter around the quantized base layer.

    Returns:
        How many linears were quantized.

    Raises:
        ValueError: the model is not float32 on the CPU.
    """
    weight = next(model.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ValueError(f"int8 quantization needs a float32 model on the CPU, got {weight.dtype} on {weight.device}")
    if "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    count = 0
    for layer in decoder_stack(model).layers:
        for parent in list(layer.modules()):
            if isinstance(parent, torch.nn.ModuleDict):  # a LoRA adapter's own A and B stay float32
                continue
            if any(name in FLOAT32_PROJECTIONS for name in _names(layer, parent)):
                continue
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear and name not in FLOAT32_PROJECTIONS:
                    setattr(parent, name, Int8Linear(child))
                    count += 1
    return count


def _names(root: Any, module: Any) -> list[str]:
    """The dotted name of ``module`` under ``root``, split (a LoRA base layer sits under its projection)."""
    for name, candidate in root.named_modules():
        if candidate is module:
            return name.split(".")
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="+", type=Path, help="task folders")
    parser.add_argument("--limit", type=int, default=None, help="at most N rows per data file")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
    from _run_info import git_commit

    import genembed
    from genembed.eval import GenembedEncoder, evaluate

    torch.set_num_threads(1)
    rows = {}
    for name in ("float32", "int8"):
        model = genembed.load(dtype="float32")
        quantized = quantize_int8(model.backbone.model) if name == "int8" else 0
        start = time.perf_counter()
        report = evaluate(GenembedEncoder(model, steps=[args.steps]), args.tasks, limit=args.limit, progress=False)
        rows[name] = {
            "quantized_linears": quantized,
            "seconds": time.perf_counter() - start,
            "scores": {task.name: task.scores[0] for task in report.tasks},
        }
        print(name, json.dumps(rows[name]), flush=True)
    gaps = {task: rows["int8"]["scores"][task] - rows["float32"]["scores"][task] for task in rows["float32"]["scores"]}
    result = {"config": {k: str(v) for k, v in vars(args).items()}, "git_commit": git_commit(), "rows": rows}
    result |= {"int8_minus_float32": gaps, "speedup": rows["float32"]["seconds"] / rows["int8"]["seconds"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["int8_minus_float32"]), f"speedup {result['speedup']:.2f}x")


if __name__ == "__main__":
    main()
