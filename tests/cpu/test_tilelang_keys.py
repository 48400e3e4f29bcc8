"""The mHC key recorders against TileLang's own key computation, on CPU.

``test_mhc_keys.py`` records each mHC compile key with a re-stated rule; two of
its tests check that rule against the real tilelang package (its
``_parse_phase1_key`` for every recorded key, and ``get_tir`` from the static
arguments alone) and skip without it. tilelang needs no GPU for either, so
here they run with the tilelang version vLLM 0.26.0 pins, installed under
``.cache/tools`` (``dsv4warmup.tilelang_site``), and must pass, not skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dsv4warmup import tilelang_site, trees
from helpers import pytest_outcomes

REPO = Path(__file__).resolve().parents[2]
TESTS = (
    "test_recorded_keys_are_tilelangs_own",
    "test_static_arguments_alone_elaborate_the_runtime_kernel",
)


def test_mhc_keys_are_tilelangs_own(tmp_path: Path) -> None:
    site = tilelang_site.tilelang_site(trees.pristine_tree("0.26.0"))
    report = tmp_path / "report.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + [f"--junitxml={report}", "tests/cpu/test_mhc_keys.py", "-k", " or ".join(TESTS)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    outcomes = pytest_outcomes(report) if report.exists() else {}
    ran = {name.rsplit("::", 1)[1]: outcome for name, outcome in outcomes.items()}
    assert ran == dict.fromkeys(TESTS, "passed"), res.stdout[-4000:] + res.stderr[-2000:]
