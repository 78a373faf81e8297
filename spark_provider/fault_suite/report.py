"""The fault suite's report: a table on the terminal, the JSON, and a PNG (each scenario's stall, coloured by
its outcome)."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = (
    "scenario",
    "fault",
    "where",
    "outcome",
    "stall_ms",
    "checkpoint_loads",
    "lost_updates",
    "duplicated_updates",
)
HEADERS = ("scenario", "fault", "where", "outcome", "stall ms", "ckpt loads", "lost", "duplicated")


def table(report: dict) -> str:
    """The scenarios as an aligned text table, then the totals."""
    rows = [HEADERS] + [tuple(str(r[c]) for c in COLUMNS) for r in report["results"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        f"{report['passed']}/{report['scenarios']} scenarios passed; updates lost: {report['lost_updates']}, "
        f"applied twice: {report['duplicated_updates']}"
    )
    for r in report["results"]:
        if not r["passed"] and r["detail"]:
            lines.append(f"  {r['scenario']}: {r['detail'].splitlines()[0]}")
    return "\n".join(lines)


def write(report: dict, out: Path) -> Path:
    """Write the JSON to `out` and the PNG beside it; returns the PNG's path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    png = out.with_suffix(".png")
    _plot(report, png)
    return png


def _plot(report: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    names = [r["scenario"] for r in results]
    stalls = [max(0, r["stall_ms"]) / 1000 for r in results]
    colours = ["tab:green" if r["passed"] else "tab:red" for r in results]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(results) + 1.6))
    ax.barh(names, stalls, color=colours)
    ax.invert_yaxis()
    ax.set_xlabel("stall after the fault: slowest batch minus the steady median (s)")
    ax.set_title(
        f"statestore faults: {report['passed']}/{report['scenarios']} passed (green), "
        f"{report['lost_updates']} lost / {report['duplicated_updates']} duplicated updates"
    )
    for y, r in enumerate(results):
        ax.text(0, y, f" {r['outcome']}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
