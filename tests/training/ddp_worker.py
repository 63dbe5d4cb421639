"""Run by ``test_multiprocess.py`` (not collected by pytest): train from a YAML config, then write this
process's trainable weights to ``OUTPUT_DIR/rank<r>.safetensors`` (the world size in its metadata).

    accelerate launch --multi_gpu --num_processes 2 tests/training/ddp_worker.py CONFIG.yaml
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from genembed.training import train
from genembed.training.lora import trainable_state


def main() -> None:
    torch.set_num_threads(1)
    # train() tears the process group down when it ends, so take rank and size from the launcher
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    result = train(sys.argv[1])
    weights = trainable_state(result.model)
    save_file(weights, str(Path(result.output_dir) / f"rank{rank}.safetensors"), metadata={"world": str(world)})


if __name__ == "__main__":
    main()
