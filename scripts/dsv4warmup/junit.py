"""Outcomes of a pytest run, read from its ``--junitxml`` report."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def outcomes(report: Path) -> dict[str, str]:
    """``{classname::name: passed | failed | error | skipped}``: what ran,
    without parsing pytest's console text."""
    out: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcome = "failed" if "failure" in kinds else "error" if "error" in kinds else None
        if outcome is None:
            outcome = "skipped" if "skipped" in kinds else "passed"
        out[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return out
