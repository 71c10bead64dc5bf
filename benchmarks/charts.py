"""The benchmark's charts (matplotlib, from the `bench` extra), written as PNGs to docs/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["makespan_chart", "timeline_chart"]

COLORS = {
    "sequential": "#9e9e9e",
    "per_turn": "#f0a030",
    "batch": "#4a90d9",
    "tickloop": "#2ca02c",
    "pydantic_ai": "#b07cc6",
    "langgraph": "#d65f5f",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def makespan_chart(
    path: Path,
    workloads: list[str],
    series: dict[str, list[float]],
    labels: dict[str, str],
    bounds: list[float],
    *,
    title: str,
    unit: str,
) -> None:
    """Grouped bars: one group per workload, one bar per strategy or peer; T* as a tick."""
    plt = _pyplot()
    fig, (ax, rel) = plt.subplots(
        2, 1, figsize=(12, 8.5), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    names = list(series)
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(workloads))]
        color = COLORS.get(name, None)
        ax.bar(xs, series[name], width, label=labels[name], color=color)
        ratios = [value / b for value, b in zip(series[name], bounds, strict=True)]
        rel.bar(xs, ratios, width, color=color)
    for i, value in enumerate(bounds):
        ax.hlines(value, i - 0.42, i + 0.42, colors="black", linewidth=1.2,
                  label="T* (bound)" if i == 0 else None)
    rel.axhline(1.0, color="black", linewidth=1.2)
    ax.set_yscale("log")
    ax.set_ylabel(f"makespan ({unit}, log scale)")
    ax.set_title(title)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    rel.set_ylabel("makespan / T*  (1 = the bound)")
    rel.grid(axis="y", which="both", alpha=0.3)
    rel.set_xticks(range(len(workloads)))
    rel.set_xticklabels(workloads, rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def timeline_chart(
    path: Path,
    workload: str,
    runs: list[tuple[str, Any]],
    order: list[str],
    bound: float,
    *,
    unit: str,
) -> None:
    """One panel per strategy: model requests on the top row, then one row per call."""
    plt = _pyplot()
    end = max(outcome.makespan for _, outcome in runs)
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(12, 1.0 + 0.32 * (len(order) + 1) * len(runs)), dpi=110,
        sharex=True,
    )
    for ax, (label, outcome) in zip(axes, runs, strict=True):
        color = COLORS.get(outcome.strategy, "#555555")
        rows = ["model", *order]
        for a, b in outcome.requests:
            ax.barh(0, b - a, left=a, height=0.6, color="#333333", alpha=0.55)
        for row, key in enumerate(order, start=1):
            if key in outcome.calls:
                a, b = outcome.calls[key]
                ax.barh(row, b - a, left=a, height=0.6, color=color)
        ax.axvline(outcome.makespan, color=color, linewidth=1.5)
        ax.axvline(bound, color="black", linestyle=":", linewidth=1)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, end * 1.02)
        ax.set_title(f"{label}: {outcome.makespan:.2f} {unit}", fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel(
        f"time ({unit}); dark bars: model requests; dotted line: T* = {bound:.2f} {unit}"
    )
    fig.suptitle(f"One run per strategy: {workload} (virtual clock)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
