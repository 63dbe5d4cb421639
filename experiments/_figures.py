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


def save(fig: Any, axes: Any, out: Path, legend_below: bool = False) -> None:
    """Grid on both panels, the legend on the first (or, with ``legend_below``, under both panels, where it
    hides no point), written to ``out`` as a PNG and closed."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    if legend_below:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8)
    else:
        axes[0].legend(fontsize=8)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
