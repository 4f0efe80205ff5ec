"""Timelines of transactions on a table-version axis: text for the terminal, a PNG with matplotlib.

Each transaction is a span from the version it read to the version where it ended:
the version it committed, or the concurrent commit it conflicted with. Overlapping
spans are transactions that ran side by side. matplotlib (the ``demo`` extra) is imported
only to draw the PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from serialake.extras import require

__all__ = ["Span", "render_png", "render_text"]

COMMITTED = "committed"
CONFLICTED = "conflicted"


@dataclass(frozen=True)
class Span:
    """One transaction: what it read, where it ended, and how."""

    group: str  # e.g. the isolation level: one panel / section per group
    section: str  # e.g. the round
    name: str
    read_version: int
    end_version: int
    status: str  # committed | conflicted | failed | no-op
    label: str  # shown after the span, e.g. "committed v5" or the exception class


def render_text(spans: Sequence[Span], *, name_width: int = 24, cell: int = 4) -> list[str]:
    """Lines of a text timeline, one block per group, versions as columns."""
    lines: list[str] = []
    for group in _ordered(s.group for s in spans):
        members = [s for s in spans if s.group == group]
        lo = min(s.read_version for s in members)
        hi = max(max(s.end_version, s.read_version) for s in members)
        header = " " * (name_width + 2) + "".join(f"v{v}".ljust(cell) for v in range(lo, hi + 1))
        lines.append(f"{group}")
        lines.append(header.rstrip())
        for section in _ordered(s.section for s in members):
            lines.append(f"  {section}")
            for s in (m for m in members if m.section == section):
                start = (s.read_version - lo) * cell
                end = (max(s.end_version, s.read_version) - lo) * cell
                mark = {COMMITTED: "●", CONFLICTED: "✘"}.get(s.status, "·")
                bar = " " * start + ("├" + "─" * max(0, end - start - 1) if end > start else "") + mark
                width = (hi - lo) * cell + 1
                lines.append(f"  {s.name[: name_width - 2].ljust(name_width - 2)}  {bar.ljust(width)}  {s.label}")
        lines.append("")
    return lines


def render_png(spans: Sequence[Span], path: str, *, title: str = "Transactions") -> str:
    """Write the timeline as a PNG (one panel per group); returns ``path``."""
    matplotlib = require("matplotlib", "The timeline picture (serialake demo)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _ordered(s.group for s in spans)
    heights = [len([s for s in spans if s.group == g]) + len(_ordered(s.section for s in spans if s.group == g))
               for g in groups]  # fmt: skip
    fig, axes = plt.subplots(
        len(groups), 1, figsize=(11, 1.2 + 0.38 * sum(heights) + 0.6 * len(groups)),
        gridspec_kw={"height_ratios": heights}, squeeze=False,
    )  # fmt: skip
    colors = {COMMITTED: "#2e7d32", CONFLICTED: "#c62828"}
    for ax, group in zip(axes[:, 0], groups):
        members = [s for s in spans if s.group == group]
        lo = min(s.read_version for s in members)
        hi = max(max(s.end_version, s.read_version) for s in members)
        labels: list[str] = []
        y = 0
        for section in _ordered(s.section for s in members):
            ax.axhline(y - 0.5, color="#bbbbbb", linewidth=0.6)
            ax.text(lo - 0.45, y, section, fontsize=8, fontweight="bold", va="center", color="#444444")
            labels.append("")
            y += 1
            for s in (m for m in members if m.section == section):
                color = colors.get(s.status, "#757575")
                width = max(s.end_version - s.read_version, 0.05)
                ax.barh(y, width, left=s.read_version, height=0.5, color=color, alpha=0.35, edgecolor=color)
                ax.plot(
                    [s.end_version], [y], marker="o" if s.status == COMMITTED else "X", color=color, markersize=8
                )
                ax.text(s.end_version + 0.12, y, s.label, fontsize=8, va="center", color=color)
                labels.append(s.name)
                y += 1
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(len(labels) - 0.5, -0.7)
        ax.set_xlim(lo - 0.5, hi + 3.2)
        ax.set_xticks(range(lo, hi + 1))
        ax.set_xticklabels([f"v{v}" for v in range(lo, hi + 1)], fontsize=8)
        ax.set_title(group, fontsize=10, loc="left")
        ax.grid(axis="x", color="#eeeeee")
        ax.set_axisbelow(True)
    axes[-1, 0].set_xlabel("table version: from the version read to the commit (or to the conflicting commit)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ordered(items: object) -> list[str]:
    out: list[str] = []
    for item in items:  # type: ignore[attr-defined]
        if item not in out:
            out.append(item)
    return out
