"""The series against real sdists: round trips, refusals, git am, patch(1)."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dsv4warmup import series as series_mod
from dsv4warmup import sources, trees
from dsv4warmup import tree as tree_mod
from dsv4warmup.__main__ import main as cli
from dsv4warmup.paths import REPO
from helpers import fresh, git, tree_digest

BASES = series_mod.available_bases()


def run_cli(*args: str) -> int:
    return cli(list(args))


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


# The frozen legacy bases and 0.33.0 stay supported whatever is added.
KEPT = ["0.25.1", "0.26.0", "0.33.0"]
NEXT = "0.34.0"  # the primary base once its series exists


def test_supported_bases() -> None:
    """The supported bases are the series in patches/ (series.available_bases,
    the one list): the kept ones, oldest first, each a release whose sdist is
    known; the newest is the default, and 0.34.0 is that newest once its
    series exists."""
    assert set(KEPT) <= set(BASES)
    assert BASES == sorted(BASES, key=_release)
    assert set(BASES) <= set(sources.SDIST_SHA256)
    newest = BASES[-1]
    if NEXT in BASES:
        assert newest == NEXT
    assert sources.DEFAULT_BASE == newest


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
    assert sorted(s.overlay_files) == series_mod.overlay_files_on_disk(base)


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
        assert (tree / rel).read_bytes() == s.overlay_bytes(rel)
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
    """A release between the supported ones (declared 0.30.0, one target file
    that differs from 0.33.0) is refused by name: its closest base, the file,
    and how to port the series (its sdist is not known: say to add it); the
    tree is left unchanged by check, apply and status."""
    tree = fresh("0.33.0", tmp_path)
    pkg_info = tree / "PKG-INFO"
    pkg_info.write_text(pkg_info.read_text().replace("Version: 0.33.0", "Version: 0.30.0"))
    touched = series_mod.load("0.33.0").touched_files
    edited = tree / touched[0]
    edited.write_text(edited.read_text() + "\n# 0.30.0 differs here\n")
    digest = tree_digest(tree)
    for cmd in ("check", "apply"):
        assert run_cli(cmd, "--tree", str(tree)) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: this patch set has no series for vLLM 0.30.0 ("), err
        assert f"closest known base: vLLM 0.33.0; 1 of the {_known()} files" in err
        assert f"files the v0.33.0 series patches (1):\n      {touched[0]}\n" in err
        assert "add the sha256 of vllm-0.30.0.tar.gz" in err and "SDIST_SHA256" in err
        assert "`make port FROM_BASE=0.33.0 BASE=0.30.0`" in err
        assert f"{tree} is unchanged" in err
        assert tree_digest(tree) == digest
    assert run_cli("status", "--tree", str(tree)) == 0
    out = capsys.readouterr().out
    assert "state:   unsupported: this patch set has no series for vLLM 0.30.0" in out
    assert "`make port FROM_BASE=0.33.0 BASE=0.30.0`" in out
    assert tree_digest(tree) == digest


def _known() -> int:
    """How many files the series touch or add (the paths of fingerprints.json)."""
    return len(next(iter(tree_mod.load_fingerprints().values())))


def _without_series(base: str, tmp_path: Path) -> Path:
    """A copy of patches/ without ``base``'s series (if it has one)."""
    dest = tmp_path / "patches"
    shutil.copytree(series_mod.PATCHES, dest, ignore=shutil.ignore_patterns(f"v{base}"))
    return dest


def _expected_nearest(version: str, patches: Path) -> tuple[str, list[str]]:
    """Independently of tree.py: the supported base (of ``patches``) with the
    fewest files differing from ``version``'s sdist, and those files."""
    table = json.loads((patches / "fingerprints.json").read_text())
    paths = sorted(next(iter(table.values())))
    members = sources.read_members(version, paths)
    have = {p: hashlib.sha256(d).hexdigest() if d is not None else None for p, d in members.items()}
    bases = sorted(
        (d.name[1:] for d in patches.glob("v*") if (d / "series").is_file()), key=_release
    )
    diffs = {b: [p for p in paths if have[p] != table[b][p]] for b in bases}
    best = min(reversed(bases), key=lambda b: len(diffs[b]))
    return best, diffs[best]


def test_a_release_without_a_series(tmp_path: Path) -> None:
    """The real sdist tree of 0.34.0 against a patch set without a 0.34.0
    series (what a user of a new release meets): check, apply and status name
    the closest base (0.33.0), how many files differ from it, every file of its
    own series that differs (first, all of them), count the rest, and say how
    to port; the tree stays byte-identical. The commands run as `make apply`
    runs them: a fresh interpreter, standard library only."""
    patches = _without_series(NEXT, tmp_path)
    tree = fresh(NEXT, tmp_path)
    digest = tree_digest(tree)
    nearest, differ = _expected_nearest(NEXT, patches)
    assert nearest == "0.33.0"
    own = sorted(set(differ) & set(series_mod.load(nearest).touched_files))
    assert own and len(own) < len(differ)
    env = dict(os.environ, PYTHONPATH=str(REPO / "scripts"), DSV4_PATCHES_DIR=str(patches))

    def run(cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", "-m", "dsv4warmup", cmd, "--tree", str(tree)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    for cmd in ("check", "apply"):
        res = run(cmd)
        assert res.returncode == 1 and res.stdout == "", res.stdout + res.stderr
        lines = res.stderr.splitlines()
        assert lines[0].startswith(f"error: this patch set has no series for vLLM {NEXT} ("), lines
        assert lines[1] == (
            f"  closest known base: vLLM {nearest}; {len(differ)} of the {_known()} files "
            "the series touch or add differ from it"
        )
        assert lines[2] == f"    files the v{nearest} series patches ({len(own)}):"
        listed = [line.split(" (")[0].strip() for line in lines[3 : 3 + len(own)]]
        assert listed == own  # all of them, first
        rest = len(differ) - len(own)
        assert lines[3 + len(own)].startswith(f"    and {rest} files only other series touch")
        assert f"  to port the series: `make port FROM_BASE={nearest} BASE={NEXT}`" in lines
        assert lines[-1] == f"  {tree} is unchanged"
        assert "Traceback" not in res.stderr
        assert tree_digest(tree) == digest
    res = run("status")
    assert res.returncode == 0, res.stderr
    for rel in differ:  # status lists every differing file
        assert f"             {rel}" in res.stdout, rel
    assert f"make port FROM_BASE={nearest} BASE={NEXT}" in res.stdout
    assert tree_digest(tree) == digest

    # The advice works with the Makefile's variables: `make port` runs the port command.
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(REPO), "port"]
        + [f"FROM_BASE={nearest}", f"BASE={NEXT}"],
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    (line,) = [ln for ln in dry.stdout.splitlines() if "dsv4warmup port" in ln]
    assert shlex.split(line)[-4:] == ["port", nearest, NEXT, f"build/dev/v{NEXT}"]


def test_not_a_vllm_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("apply", "--tree", str(tmp_path)) == 1
    assert "not a vLLM source tree" in capsys.readouterr().err


def test_a_tree_of_no_known_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A vllm/ folder holding none of the files any base has, declaring no
    version: refused as unknown, with no made-up closest base."""
    (tmp_path / "vllm").mkdir()
    assert run_cli("check", "--tree", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot tell which vLLM release this tree is"), err
    assert "closest" not in err and f"{tmp_path} is unchanged" in err
    assert run_cli("status", "--tree", str(tmp_path)) == 0
    assert "state:   unknown: cannot tell" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm"]


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
