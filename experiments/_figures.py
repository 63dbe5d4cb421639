"""Not a script: the two-panel figure the campaign's curve scripts draw (headless matplotlib), and saving it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def two_panels(width: float, height: float) -> tuple[Any, Any]:
    """A figure of two side-by-side axes, on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, 2, figsize=(width, height))


def save(fig: Any, axes: Any, out: Path) -> None:
    """Grid on both panels, the legend on the first, written to ``out`` as a PNG and closed."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
