"""An audit's rows: one kernel's runtime, warmed, missing and wasted keys.

The result type every audit produces and prints; it imports nothing of the
audits, so the in-tree audit (:mod:`dsv4warmup.tree_audit`), the drivers and
the parent-side CLI (:mod:`dsv4warmup.audit`) all sit above it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    kernel: str
    runtime_keys: int
    warmed_keys: int
    missing: int
    wasted: int
    group: str = ""
    # registry-era rows (0.33.0 on): which model runner, and a witness batch per missing key
    runner: str = ""
    witnesses: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.runner:
            del d["runner"], d["witnesses"]
        return d


def format_table(title: str, rows: list[Row]) -> str:
    width = max([len(r.kernel) for r in rows] + [6])
    lines = [title]
    runner = None
    for r in rows:
        if r.runner != runner or len(lines) == 1:
            runner = r.runner
            if runner:
                lines.append(f"  model runner {runner}:")
            lines.append(f"  {'kernel':<{width}}  runtime  warmed  missing  wasted")
        flag = "  <-- MISSING" if r.missing else ""
        lines.append(
            f"  {r.kernel:<{width}}  {r.runtime_keys:>7}  {r.warmed_keys:>6}  "
            f"{r.missing:>7}  {r.wasted:>6}{flag}"
        )
        for witness in r.witnesses:
            lines.append(f"      missing key, e.g. from: {witness}")
    tot = [
        sum(getattr(r, f) for r in rows)
        for f in ("runtime_keys", "warmed_keys", "missing", "wasted")
    ]
    lines.append(f"  {'total':<{width}}  {tot[0]:>7}  {tot[1]:>6}  {tot[2]:>7}  {tot[3]:>6}")
    return "\n".join(lines)
