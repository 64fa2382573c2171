"""The needle heatmap (context length x depth), drawn only when matplotlib is installed (``plot`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

LEGEND = "green recalled, red missed, grey error"


def heatmap_title(required_tokens: int | None = None, verdict: str | None = None, release: str | None = None) -> str:
    """The heatmap's title: the gate's verdict and the release first (a passing and a failing picture differ at a
    glance), then the legend and the requirement the dashed line marks."""
    head = f"Needle {verdict.upper()}" if verdict else "Needle recall"
    title = f"{head}{f' - release {release}' if release else ''}\n{LEGEND}"
    if required_tokens:
        title += f"\nrequired: every cell up to {required_tokens} tokens (dashed line)"
    return title


def write_heatmap(path: Path, cells: list[dict[str, Any]], required_tokens: int | None = None,
                  verdict: str | None = None, release: str | None = None) -> bool:
    """Draw recall per (context, depth) cell to ``path`` as PNG; False when matplotlib is missing.

    The classic view: context length across, depth down (0 = start of the document), green for
    recalled, red for missed, grey for cells that errored or did not run; a dashed line after the last
    length within ``required_tokens``; the title names the gate's ``verdict`` and the ``release``.
    """
    return write_heatmaps(path, [(heatmap_title(required_tokens, verdict, release), cells)], required_tokens)


def write_heatmaps(path: Path, panels: Sequence[tuple[str, list[dict[str, Any]]]],
                   required_tokens: int | None = None) -> bool:
    """Several heatmaps side by side in one PNG, one ``(title, cells)`` panel each (empty ones skipped), each with
    a dashed line at ``required_tokens``.

    False when matplotlib is missing or no panel has cells.
    """
    figure = heatmap_figure(panels, required_tokens)
    if figure is None:
        return False
    figure.savefig(path, dpi=110)
    return True


def heatmap_figure(panels: Sequence[tuple[str, list[dict[str, Any]]]], required_tokens: int | None = None) -> Any:
    """The heatmaps' matplotlib Figure (None when matplotlib is missing or no panel has cells)."""
    try:
        from matplotlib.colors import ListedColormap
        from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
    except ImportError:
        return None
    panels = [(title, cells) for title, cells in panels if cells]
    if not panels:
        return None
    widths = [max(5.5, 1.5 + 0.9 * len({int(c["context_tokens"]) for c in cells})) for _, cells in panels]
    heights = [max(3.5, 1.5 + 0.45 * len({float(c["depth"]) for c in cells})) for _, cells in panels]
    width, height = sum(widths), max(heights)
    fig = Figure(figsize=(width, height))
    # Fixed margins in inches (the labels' room), not tight_layout: that lays every text out once more
    # before savefig draws it all again, about a fifth of the time the plot takes.
    axes_width = (width - MARGINS["left"] - MARGINS["right"] - MARGINS["left"] * (len(panels) - 1)) / len(panels)
    fig.subplots_adjust(left=MARGINS["left"] / width, right=1 - MARGINS["right"] / width,
                        bottom=MARGINS["bottom"] / height, top=1 - MARGINS["top"] / height,
                        wspace=MARGINS["left"] / axes_width)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    cmap = ListedColormap(["#bdbdbd", "#d73027", "#1a9850"])
    for ax, (title, cells) in zip(axes, panels, strict=True):
        _draw(ax, cells, cmap, required_tokens)
        ax.set_title(title, fontsize=9)
    return fig


# Room in inches around each heatmap: the depth labels left, the rotated lengths and the axis label below,
# a three-line title above.
MARGINS = {"left": 0.8, "right": 0.15, "bottom": 0.95, "top": 0.75}


def _draw(ax: Any, cells: list[dict[str, Any]], cmap: Any, required_tokens: int | None = None) -> None:
    lengths = sorted({int(c["context_tokens"]) for c in cells})
    depths = sorted({float(c["depth"]) for c in cells})
    grid = [[0.0] * len(lengths) for _ in depths]  # 0 = no answer, 1 = missed, 2 = recalled
    for cell in cells:
        value = 2.0 if cell.get("recalled") else (0.0 if cell.get("error") else 1.0)
        grid[depths.index(float(cell["depth"]))][lengths.index(int(cell["context_tokens"]))] = value
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], rotation=45)
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    for y, row in enumerate(grid):
        for x, value in enumerate(row):
            ax.text(x, y, ("!", "✗", "✓")[int(value)], ha="center", va="center", color="white", fontsize=10)
    # White lines between cells so neighbouring cells of one colour stay readable as a grid.
    ax.set_xticks([i - 0.5 for i in range(1, len(lengths))], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, len(depths))], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    within = [i for i, n in enumerate(lengths) if n <= required_tokens] if required_tokens else []
    if within:  # the requirement: every cell left of the line must recall
        ax.axvline(within[-1] + 0.5, color="black", linestyle="--", linewidth=2,
                   label=f"required: {required_tokens} tokens")
    ax.set_xlabel("context length (target tokens)")
    ax.set_ylabel("needle depth (0% = start)")


# The client's figures compared with the previous release: (figure, label, scale to the unit shown).
PERF_LATENCIES = (("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99"), ("itl_p50_s", "inter-token p50"))
PERF_RATE = ("output_tokens_per_s", "output tokens/s")


def write_perf_comparison(path: Path, current: dict[str, Any], previous: dict[str, Any], *,
                          release: str, previous_release: str) -> bool:
    """This release's client figures beside the previous release's, as grouped bars (latency in ms,
    throughput in tokens/s) to ``path`` as PNG; False when matplotlib is missing or nothing compares."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False
    latencies = [(label, previous.get(f), current.get(f)) for f, label in PERF_LATENCIES
                 if previous.get(f) is not None and current.get(f) is not None]
    rate = (previous.get(PERF_RATE[0]), current.get(PERF_RATE[0]))
    if not latencies and None in rate:
        return False
    fig = Figure(figsize=(9, 3.8))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    width = 0.38
    xs = range(len(latencies))
    for offset, name, column, colour in ((-width / 2, f"previous {previous_release}", 1, "#9e9e9e"),
                                         (width / 2, f"this {release}", 2, "#2b83ba")):
        left.bar([x + offset for x in xs], [row[column] * 1000 for row in latencies], width, label=name, color=colour)
    left.set_xticks(list(xs), [row[0] for row in latencies])
    left.set_ylabel("milliseconds (lower is better)")
    left.legend(fontsize=7)
    left.set_title("Latency vs the previous release", fontsize=9)
    if None not in rate:
        right.bar([0, 1], [float(rate[0]), float(rate[1])], 0.6, color=["#9e9e9e", "#2b83ba"])
        right.set_xticks([0, 1], ["previous", "this"])
    right.set_ylabel("output tokens/s (higher is better)")
    right.set_title("Throughput", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True
