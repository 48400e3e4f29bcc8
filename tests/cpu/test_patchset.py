"""The series against real sdists: round trips, refusals, git am, patch(1)."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
from dsv4warmup import series as series_mod
from dsv4warmup import sources, trees
from dsv4warmup import tree as tree_mod
from dsv4warmup.__main__ import main as cli
from dsv4warmup.paths import OVERLAY
from helpers import fresh, git, tree_digest

BASES = series_mod.available_bases()


def run_cli(*args: str) -> int:
    return cli(list(args))


def test_supported_bases() -> None:
    assert BASES == ["0.25.1", "0.26.0"]


@pytest.mark.parametrize("base", BASES)
def test_series_is_well_formed(base: str) -> None:
    s = series_mod.load(base)
    assert s.patches
    for patch in s.patches:
        text = patch.text
        assert re.match(r"From [0-9a-f]{40} ", text), patch.name
        assert re.search(r"^From: .+ <.+@.+>$", text, re.M), patch.name
        assert re.search(r"^Subject: \[PATCH\] (\[[^\]]+\])+ \S", text, re.M), patch.name
        assert re.search(r"^Signed-off-by: .+ <.+@.+>$", text, re.M), patch.name
        body = text.split("\n\n", 1)[1].split("\n---\n", 1)[0]
        assert len(body.split()) > 20, f"{patch.name}: the body must say why"
    assert sorted(s.overlay_files) == series_mod.overlay_files_on_disk()


@pytest.mark.parametrize("base", BASES)
def test_round_trip(base: str, tmp_path: Path) -> None:
    tree = fresh(base, tmp_path)
    pristine = tree_digest(tree)
    s = series_mod.load(base)
    before = {rel: (tree / rel).read_bytes() for rel in s.touched_files}

    assert run_cli("apply", "--tree", str(tree)) == 0
    for rel, data in before.items():
        assert (tree / rel).read_bytes() != data, f"{rel} unchanged by apply"
    for rel in s.overlay_files:
        assert (tree / rel).read_bytes() == (OVERLAY / rel).read_bytes()
    applied = tree_digest(tree)
    assert tree_mod.detect(tree).state == "applied"

    assert run_cli("apply", "--tree", str(tree)) == 0  # already applied: no-op
    assert tree_digest(tree) == applied

    assert run_cli("revert", "--tree", str(tree)) == 0
    assert tree_digest(tree) == pristine
    res = subprocess.run(["diff", "-r", str(trees.pristine_tree(base)), str(tree)])
    assert res.returncode == 0


@pytest.mark.parametrize("base", BASES)
def test_check_changes_nothing(base: str, tmp_path: Path) -> None:
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    assert run_cli("check", "--tree", str(tree)) == 0
    assert run_cli("status", "--tree", str(tree)) == 0
    assert tree_digest(tree) == digest


def test_unsupported_release_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "vllm"
    sources.extract("0.33.0", tree)
    digest = tree_digest(tree)
    assert run_cli("apply", "--tree", str(tree)) == 1
    err = capsys.readouterr().err
    assert "0.33.0" in err and "not supported" in err and "0.26.0" in err
    touched = series_mod.load("0.26.0").touched_files
    assert "differ from every supported base" in err
    assert any(path in err for path in touched)  # names the files that differ
    assert tree_digest(tree) == digest


def test_not_a_vllm_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("apply", "--tree", str(tmp_path)) == 1
    assert "not a vLLM source tree" in capsys.readouterr().err


def test_conflicting_local_edit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fresh("0.26.0", tmp_path)
    s = series_mod.load("0.26.0")
    path = s.patches[0].files[0]
    hunk = next(h for h in s.patches[0].hunks() if h.path == path)
    target = tree / path
    lines = target.read_text().splitlines(keepends=True)
    # Rewrite every line the hunk spans, so no fuzz can place it.
    for i in range(hunk.old_start - 1, hunk.old_start - 1 + hunk.old_len):
        lines[i] = "# local edit\n"
    target.write_text("".join(lines))
    digest = tree_digest(tree)
    assert run_cli("apply", "--tree", str(tree)) == 1
    err = capsys.readouterr().err
    assert path in err and s.patches[0].name in err and "@@" in err
    assert "unchanged" in err
    assert tree_digest(tree) == digest


def _far_from_every_hunk(base: str, path: str) -> int:
    """A line index of ``path`` in the middle of the longest stretch that the
    series leaves unchanged (pristine vs fully patched)."""
    before = (trees.pristine_tree(base) / path).read_text().splitlines()
    after = (trees.patched_tree(base) / path).read_text().splitlines()
    blocks = difflib.SequenceMatcher(None, before, after, autojunk=False).get_matching_blocks()
    longest = max(blocks, key=lambda b: b.size)
    assert longest.size > 10
    return longest.a + longest.size // 2


def test_non_conflicting_local_edit_applies_with_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fresh("0.26.0", tmp_path)
    path = series_mod.load("0.26.0").patches[0].files[0]
    lines = (tree / path).read_text().splitlines(keepends=True)
    at = _far_from_every_hunk("0.26.0", path)
    lines.insert(at, "# a local edit the series does not touch\n")
    (tree / path).write_text("".join(lines))
    assert run_cli("apply", "--tree", str(tree)) == 0
    captured = capsys.readouterr()
    assert f"warning: {path} differs from pristine vLLM 0.26.0" in captured.err
    assert "# a local edit the series does not touch\n" in (tree / path).read_text()
    assert run_cli("revert", "--tree", str(tree)) == 0
    assert (tree / path).read_text() == "".join(lines)


def test_revert_refuses_an_edited_overlay_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = series_mod.load("0.26.0")
    if not s.overlay_files:
        pytest.skip("the series has no overlay files")
    tree = fresh("0.26.0", tmp_path)
    assert run_cli("apply", "--tree", str(tree)) == 0
    with open(tree / s.overlay_files[0], "a") as f:
        f.write("# edited\n")
    digest = tree_digest(tree)
    assert run_cli("revert", "--tree", str(tree)) == 1
    assert s.overlay_files[0] in capsys.readouterr().err
    assert tree_digest(tree) == digest


@pytest.mark.parametrize("base", BASES)
def test_mode_am_one_commit_per_patch(base: str, tmp_path: Path) -> None:
    tree = fresh(base, tmp_path)
    git(tree, "init", "-q")
    git(tree, "add", "-A", "-f", ".")
    git(tree, "commit", "-q", "-m", "pristine")
    s = series_mod.load(base)
    assert run_cli("apply", "--tree", str(tree), "--mode", "am") == 0
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"dsv4-warmup/v{base}"
    log = (
        git(
            tree,
            "log",
            "--format=%an%x09%s%x09%(trailers:key=Signed-off-by,valueonly,separator=%x2C)",
            f"-{len(s.patches) + 1}",
        )
        .strip()
        .splitlines()
    )
    assert len(log) == len(s.patches) + 1 and log[-1].startswith("t\tpristine")
    for line, patch in zip(reversed(log[:-1]), s.patches, strict=True):
        author, subject, signoff = line.split("\t")
        assert subject in patch.subject
        assert signoff and author == "dsv4-warmup"
    assert git(tree, "status", "--porcelain").strip() == ""
    assert tree_mod.detect(tree).state == "applied"
    for i, patch in enumerate(s.patches):
        rev = f"HEAD~{len(s.patches) - 1 - i}"
        files = set(git(tree, "show", "--format=", "--name-only", rev).split())
        assert files == set(patch.files) | set(patch.overlay)


def _patch_p1(tree: Path, patch: Path) -> subprocess.CompletedProcess[str]:
    # Not -s: patch(1) only reports offsets and fuzz when not silenced.
    return subprocess.run(
        ["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-i", str(patch)],
        cwd=tree,
        capture_output=True,
        text=True,
    )


def _inexact(res: subprocess.CompletedProcess[str]) -> bool:
    out = res.stdout.lower()
    return "fuzz" in out or "offset" in out


@pytest.mark.parametrize("base", BASES)
def test_plain_patch_p1_applies_in_order(base: str, tmp_path: Path) -> None:
    tree = fresh(base, tmp_path)
    for patch in series_mod.load(base).patches:
        res = _patch_p1(tree, patch.path)
        assert res.returncode == 0, f"{patch.name}: {res.stdout}{res.stderr}"
        assert "patching file" in res.stdout, res.stdout
        assert not _inexact(res), f"{patch.name} applies with offset or fuzz:\n{res.stdout}"


def test_patch_p1_offsets_are_seen(tmp_path: Path) -> None:
    """Positive control of the check above: a target shifted by one line
    applies, and patch(1) says so."""
    patch = series_mod.load(BASES[-1]).patches[0]
    tree = fresh(BASES[-1], tmp_path)
    target = tree / patch.files[0]
    target.write_text("# shifted\n" + target.read_text())
    res = _patch_p1(tree, patch.path)
    assert res.returncode == 0 and _inexact(res), res.stdout


def test_fingerprints_match_the_sdists() -> None:
    table = json.loads(tree_mod.FINGERPRINTS.read_text())
    assert set(table) == set(sources.SDIST_SHA256)
    paths = sorted(next(iter(table.values())))
    for base in BASES:
        assert set(series_mod.load(base).touched_files) <= set(paths)
    for version, fp in table.items():
        members = sources.read_members(version, paths)
        got = {
            p: hashlib.sha256(d).hexdigest() if d is not None else None for p, d in members.items()
        }
        assert got == fp, version
