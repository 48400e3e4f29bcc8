"""The Makefile passes every path as one argument: a tree, output or input
in a folder whose name has spaces or quotes works (issue 36 item 6:
`make apply VLLM_DIR="/path with space/vllm"` used to fail with
`unrecognized arguments: space/vllm`)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from dsv4warmup import series as series_mod
from dsv4warmup.paths import REPO
from helpers import fresh, tree_digest

ODD = "a folder with space's"  # a space and a single quote


def make(*args: str, dry: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["-n", "-B"] if dry else []
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *flags, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_apply_revert_status_in_a_folder_with_spaces(tmp_path: Path) -> None:
    base = series_mod.available_bases()[-1]
    tree = fresh(base, tmp_path / ODD)
    pristine = tree_digest(tree)
    var = f"VLLM_DIR={tree}"

    res = make("check", var)
    assert res.returncode == 0, res.stderr
    assert f"applies cleanly to {tree}" in res.stdout
    res = make("status", var)
    assert res.returncode == 0 and f"tree:    {tree}" in res.stdout, res.stderr
    assert tree_digest(tree) == pristine

    res = make("apply", var)
    assert res.returncode == 0, res.stderr
    assert f"applied the v{base} series" in res.stdout and str(tree) in res.stdout
    assert tree_digest(tree) != pristine
    res = make("revert", var)
    assert res.returncode == 0, res.stderr
    assert tree_digest(tree) == pristine


def _command(res: subprocess.CompletedProcess[str], verb: str) -> list[str]:
    """The words of the one `dsv4warmup <verb>` command a dry run prints."""
    assert res.returncode == 0, res.stderr
    text = res.stdout.replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if f"dsv4warmup {verb}" in ln]
    return shlex.split(line)


P = f"/tmp/{ODD}/x"


@pytest.mark.parametrize(
    ("verb", "args", "expected"),
    [
        ("apply", ["VLLM_DIR=" + P, "BRANCH=b c", "MODE=am"], ["--tree", P, "--mode", "am"]),
        ("apply", ["VLLM_DIR=" + P, "BRANCH=b c", "MODE=am"], ["--branch", "b c"]),
        ("check", ["VLLM_DIR=" + P], ["check", "--tree", P]),
        ("revert", ["VLLM_DIR=" + P], ["revert", "--tree", P]),
        ("status", ["VLLM_DIR=" + P], ["status", "--tree", P]),
        ("audit", ["PATCHED_TREE=" + P, "JSON=" + P + ".json"], ["--patched-tree", P]),
        ("audit", ["PATCHED_TREE=" + P, "JSON=" + P + ".json"], ["--json-out", P + ".json"]),
        ("devtree", ["BASE=0.33.0", "DEST=" + P], ["devtree", "0.33.0", P]),
        ("regen", ["BASE=0.33.0", "FROM=" + P], ["regen", "0.33.0", P]),
        ("port", ["FROM_BASE=0.33.0", "BASE=0.34.0", "DEST=" + P], ["0.33.0", "0.34.0", P]),
        ("wheel", ["WHEEL=" + P + ".whl"], ["--wheel", P + ".whl"]),
        ("pr", ["OUT=" + P, "SIGNOFF=Jo O'Neil <jo@example.com>"], ["--out", P]),
        (
            "pr",
            ["OUT=" + P, "SIGNOFF=Jo O'Neil <jo@example.com>"],
            ["--signoff", "Jo O'Neil <jo@example.com>"],
        ),
    ],
)
def test_every_path_is_one_argument(verb: str, args: list[str], expected: list[str]) -> None:
    words = _command(make(verb, *args, dry=True), verb)
    at = [i for i in range(len(words)) if words[i : i + len(expected)] == expected]
    assert at, f"{expected} not in {words}"


def test_make_port_needs_from_base() -> None:
    res = make("port", "BASE=0.34.0")
    assert res.returncode != 0
    assert "make port needs FROM_BASE=" in res.stderr
