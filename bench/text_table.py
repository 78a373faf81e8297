"""A plain-text table for the benchmarks' printed summaries."""

from __future__ import annotations

from collections.abc import Sequence


def print_table_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print `header` and `rows` as left-aligned columns two spaces apart."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
