"""`make apply` / `make revert` never wedge a tree (issue #17).

On the newest base of each overlay layout: a failure injected at every step
of the writer, in either direction, is rolled back (one line, exit 1, tree
unchanged); a real SIGKILL at chosen steps leaves a journal that `status`
reports and the next `apply` rolls back. On every base: a failed rollback, a
Ctrl-C or SIGTERM mid-write and a killed recovery are rolled back; immutable
files, a full disk and an occupied temp path are refused cleanly; one run per
tree. The default tree is kept; the patch commands need only the standard
library. The trees are what a run can see of a pristine sdist tree (``fresh``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from dsv4warmup import __main__ as cli_mod
from dsv4warmup import journal, sources, trees
from dsv4warmup import series as series_mod
from dsv4warmup import tree as tree_mod
from dsv4warmup.__main__ import main as cli
from dsv4warmup.paths import REPO
from helpers import tree_digest

BASES = series_mod.available_bases()


def _one_per_layout(bases: list[str]) -> list[str]:
    """The newest base of each overlay layout (the shared vllm_overlay/ of the
    frozen 0.25.1/0.26.0, a v<base>/ root of its own for later ones): the
    exhaustive step-by-step tests run there, since what they vary with is the
    writer's step sequence, not the patches' content (every base's round trip
    is in test_patchset.py, every base's refusals below)."""
    newest: dict[bool, str] = {}
    for base in bases:
        newest[series_mod.overlay_root(base) == series_mod.OVERLAY] = base
    return [b for b in bases if b in newest.values()]


STEP_BASES = _one_per_layout(BASES)
ENOSPC = os.strerror(errno.ENOSPC)
WRITES = ("rename", "unlink")  # the step that changes a tree file


class Steps:
    """journal.fault_hook: records each step; raises ENOSPC at the chosen ones."""

    def __init__(self, fail_at: frozenset[int] = frozenset()) -> None:
        self.fail_at = fail_at
        self.seen: list[tuple[str, str]] = []

    def __call__(self, kind: str, rel: str) -> None:
        self.seen.append((kind, rel))
        if len(self.seen) in self.fail_at:
            raise OSError(errno.ENOSPC, ENOSPC, rel)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power-cut durability is not what these tests check: skip fsync for speed
    (the round trips of test_patchset.py keep it)."""
    monkeypatch.setattr(journal, "FSYNC", False)


@contextmanager
def steps(*fail_at: int) -> Iterator[Steps]:
    hook = Steps(frozenset(fail_at))
    journal.fault_hook = hook
    try:
        yield hook
    finally:
        journal.fault_hook = None


def fresh(base: str, tmp_path: Path) -> Path:
    """What a run can see of ``base``'s pristine sdist tree, copied from the
    generated one: PKG-INFO and every file any series touches or adds
    (fingerprints.json's paths), plus one file of each folder on the way to
    them (a folder the writer finds is never empty, as in the real tree). A run
    reads and writes nothing else, so byte-identical here is byte-identical
    there; copying, hashing and deleting the other ~9,000 files for every test
    cost minutes per base."""
    src = trees.pristine_tree(base)
    dest = tmp_path / "vllm"
    wanted = {"PKG-INFO"}
    for rel in tree_mod.base_fingerprint(tree_mod.load_fingerprints(), base):
        wanted.add(rel)
        folder = (src / rel).parent
        while folder != src:
            if folder.is_dir():
                files = sorted(f.name for f in folder.iterdir() if f.is_file())
                wanted.update(str((folder / f).relative_to(src)) for f in files[:1])
            folder = folder.parent
    for rel in wanted:
        if (src / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dest / rel)
    return dest


def watched(base: str) -> list[str]:
    s = series_mod.load(base)
    return s.touched_files + s.overlay_files


def local_state(tree: Path, paths: list[str]) -> dict[str, object]:
    """Names and modes in every folder on the way to ``paths`` (strays, the
    journal and the lock show up here) and the bytes of ``paths``: a cheap
    'byte-identical' for the folders a run can touch."""
    dirs = {tree}
    for rel in paths:
        p = (tree / rel).parent
        while p != tree:
            dirs.add(p)
            p = p.parent
    out: dict[str, object] = {}
    for d in dirs:
        for c in d.iterdir():
            out[str(c.relative_to(tree))] = c.lstat().st_mode
    for rel in paths:
        p = tree / rel
        out[rel] = (
            out.get(rel),
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
        )
    return out


def run(cmd: str, tree: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli([cmd, "--tree", str(tree)])
    out, err = capsys.readouterr()
    return rc, out, err


def sub(cmd: str, tree: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter without site-packages (``-S``): the
    standard library only, as ``make apply`` runs it."""
    full = dict(os.environ, PYTHONPATH=str(REPO / "scripts"), DSV4_NO_FSYNC="1", **env)
    return subprocess.run(
        [sys.executable, "-S", "-m", "dsv4warmup", cmd, "--tree", str(tree)],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def recorded(tree: Path, cmd: str, capsys: pytest.CaptureFixture[str]) -> list[tuple[str, str]]:
    """Run ``cmd`` cleanly, returning the writer's steps."""
    with steps() as hook:
        rc, out, err = run(cmd, tree, capsys)
    assert rc == 0, err
    return hook.seen


def one_error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# --------------------------------------------------------------------------
# In-process injection at every step


def _faulted(
    tree: Path,
    cmd: str,
    k: int,
    step: tuple[str, str],
    before: dict[str, object],
    paths: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    kind, rel = step
    with steps(k) as hook:
        rc, out, err = run(cmd, tree, capsys)
    assert hook.seen[k - 1] == step, (cmd, k)
    if kind == "journal-discard":
        # Past the commit point the run is complete; the finished journal it
        # could not delete is removed by the next run.
        assert rc == 0 and (tree / journal._DONE).is_dir(), err
        return
    line = one_error_line(err)
    assert rc == 1 and out == "", (cmd, k, step)
    assert line.startswith("error: cannot write ") and ENOSPC in line, line
    assert line.endswith(f"{tree} is unchanged"), line
    assert (journal.JOURNAL if kind.startswith("journal") else rel) in line, line
    assert local_state(tree, paths) == before, (cmd, k, step)


@pytest.mark.parametrize("base", STEP_BASES)
def test_a_failure_at_any_write_step_is_rolled_back(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every step of apply and of revert (journal, writes, renames, deletes,
    journal close/discard) fails once; each time the tree is as before, and
    the next apply completes and the next revert gives back pristine."""
    tree = fresh(base, tmp_path)
    paths = watched(base)
    digest = tree_digest(tree)
    pristine = local_state(tree, paths)
    apply_steps = recorded(tree, "apply", capsys)
    applied = local_state(tree, paths)
    revert_steps = recorded(tree, "revert", capsys)
    assert local_state(tree, paths) == pristine
    kinds = {kind for kind, _ in apply_steps + revert_steps}
    assert {"journal", "journal-commit", "write", "rename", "unlink", "journal-close"} <= kinds

    for k in range(1, max(len(apply_steps), len(revert_steps)) + 1):
        if k <= len(apply_steps):
            _faulted(tree, "apply", k, apply_steps[k - 1], pristine, paths, capsys)
        assert run("apply", tree, capsys)[0] == 0
        assert local_state(tree, paths) == applied, k
        if k <= len(revert_steps):
            _faulted(tree, "revert", k, revert_steps[k - 1], applied, paths, capsys)
        assert run("revert", tree, capsys)[0] == 0
        assert local_state(tree, paths) == pristine, k
    assert tree_digest(tree) == digest


@pytest.mark.parametrize("base", BASES)
def test_a_failed_rollback_is_finished_by_the_next_run(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    seen = recorded(tree, "apply", capsys)
    assert run("revert", tree, capsys)[0] == 0
    renames = [i + 1 for i, (kind, _) in enumerate(seen) if kind == "rename"]
    k = renames[2]  # two files written, the third in its temp file
    with steps(k, k + 1):  # k + 1: the rollback's first step
        rc, out, err = run("apply", tree, capsys)
    line = one_error_line(err)
    assert rc == 1 and "rolling back failed too" in line and journal.JOURNAL in line
    assert (tree / journal.JOURNAL).is_dir()
    rc, out, err = run("status", tree, capsys)
    assert f"state:   interrupted apply of v{base} at file 3 of " in out
    rc, out, err = run("apply", tree, capsys)
    assert rc == 0 and f"recovered an interrupted apply of v{base} at file 3 of " in out
    assert tree_mod.detect(tree).state == "applied"
    assert run("revert", tree, capsys)[0] == 0
    assert tree_digest(tree) == digest


@pytest.mark.parametrize("base", BASES)
def test_ctrl_c_and_sigterm_mid_write_roll_back_at_once(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    seen = recorded(tree, "apply", capsys)
    assert run("revert", tree, capsys)[0] == 0
    renames = [i + 1 for i, (kind, _) in enumerate(seen) if kind == "rename"]
    k = renames[len(renames) // 2]
    victim = seen[k - 1][1]

    def ctrl_c(kind: str, rel: str) -> None:
        if (kind, rel) == seen[k - 1]:
            raise KeyboardInterrupt

    journal.fault_hook = ctrl_c
    try:
        rc, out, err = run("apply", tree, capsys)
    finally:
        journal.fault_hook = None
    assert rc == 1 and one_error_line(err) == (
        f"error: interrupted (SIGINT) while writing {victim}; {tree} is unchanged"
    )
    assert tree_digest(tree) == digest
    res = sub("apply", tree, DSV4_TEST_FAULT=f"term@{k}")
    assert res.returncode == 1 and one_error_line(res.stderr) == (
        f"error: interrupted (SIGTERM) while writing {victim}; {tree} is unchanged"
    )
    assert tree_digest(tree) == digest


# --------------------------------------------------------------------------
# A real SIGKILL


def kill_points(seen: list[tuple[str, str]]) -> list[int]:
    """Steps to kill at: the first (journal folder), the journal's middle
    file and its commit, the first write, rename and delete, the middle and
    last change, the journal's close and the finished journal's removal."""

    def at(*kinds: str) -> list[int]:
        return [i + 1 for i, (kind, _) in enumerate(seen) if kind in kinds]

    journal_files, changes = at("journal"), at(*WRITES)
    picks = {1, journal_files[len(journal_files) // 2], changes[len(changes) // 2], changes[-1]}
    for kind in ("journal-commit", "write", "rename", "unlink", "journal-close", "journal-discard"):
        picks |= set(at(kind)[:1])
    return sorted(picks)


def _expect_after_kill(
    tree: Path, base: str, cmd: str, k: int, seen: list[tuple[str, str]], status_out: str
) -> bool:
    """Check what status says after a kill before step k; True if a journal
    was left (the next run must say it recovered)."""
    kinds = [kind for kind, _ in seen]
    commit, close = kinds.index("journal-commit") + 1, kinds.index("journal-close") + 1
    n = sum(kind in WRITES for kind in kinds)
    done = sum(kind in WRITES for kind in kinds[: k - 1])
    if commit < k <= close:
        where = f"at file {done + 1} of {n}" if done < n else f"after the last of its {n} files"
        assert f"state:   interrupted {cmd} of v{base} {where}" in status_out, status_out
        assert "`make apply` or `make revert` rolls it back first" in status_out
        return True
    assert "interrupted" not in status_out.split("\n")[2], status_out
    leftover = journal._DONE if k > close else journal.LOCK
    assert f"note:    {leftover} was left by an interrupted run" in status_out, status_out
    return False


@pytest.mark.parametrize("base", STEP_BASES)
def test_sigkill_mid_run_is_recovered(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fresh(base, tmp_path)
    paths = watched(base)
    digest = tree_digest(tree)
    pristine = local_state(tree, paths)
    seen = {"apply": recorded(tree, "apply", capsys)}
    applied = local_state(tree, paths)
    seen["revert"] = recorded(tree, "revert", capsys)
    tried: dict[str, list[int]] = {}
    for cmd in ("apply", "revert"):
        tried[cmd] = kill_points(seen[cmd])
        for k in tried[cmd]:
            if cmd == "revert":
                assert run("apply", tree, capsys)[0] == 0
            res = sub(cmd, tree, DSV4_TEST_FAULT=f"kill@{k}")
            assert res.returncode == -signal.SIGKILL, (cmd, k, res.stderr)
            rc, out, err = run("status", tree, capsys)
            assert rc == 0, err
            left_journal = _expect_after_kill(tree, base, cmd, k, seen[cmd], out)
            rc, out, err = run("apply", tree, capsys)
            assert rc == 0, (cmd, k, err)
            assert ("recovered an interrupted" in out) == left_journal, (cmd, k, out)
            assert local_state(tree, paths) == applied, (cmd, k)
            assert run("revert", tree, capsys)[0] == 0
            assert local_state(tree, paths) == pristine, (cmd, k)
    assert tree_digest(tree) == digest
    print(f"v{base} SIGKILL steps: {tried}")


@pytest.mark.parametrize("base", BASES)
def test_sigkill_during_recovery_and_check(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recovery that is itself killed is redone; check reports a pending
    journal without writing."""
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    seen = recorded(tree, "apply", capsys)
    assert run("revert", tree, capsys)[0] == 0
    renames = [i + 1 for i, (kind, _) in enumerate(seen) if kind == "rename"]
    k = renames[len(renames) // 2]
    assert sub("apply", tree, DSV4_TEST_FAULT=f"kill@{k}").returncode == -signal.SIGKILL
    before = tree_digest(tree)
    rc, out, err = run("check", tree, capsys)
    assert rc == 0 and f"holds an interrupted apply of v{base}" in out, err
    assert "then would apply the" in out
    assert tree_digest(tree) == before
    for at in (1, 2, 4):  # the rollback's first steps: temp file, first restores
        res = sub("apply", tree, DSV4_TEST_FAULT=f"kill@{at}")
        assert res.returncode == -signal.SIGKILL, res.stderr
        assert (tree / journal.JOURNAL).is_dir()
        assert "state:   interrupted apply" in run("status", tree, capsys)[1]
    res = sub("revert", tree)
    assert res.returncode == 0 and "recovered an interrupted apply" in res.stdout, res.stderr
    assert "not applied" in res.stdout
    assert tree_digest(tree) == digest


# --------------------------------------------------------------------------
# Writes the OS refuses


def _write_order(tree: Path, base: str) -> list[str]:
    return list(journal._changes(tree, tree_mod.plan_apply(tree, series_mod.load(base))))


@pytest.mark.parametrize("base", BASES)
def test_an_immutable_file_is_refused_cleanly(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    s = series_mod.load(base)
    victim = s.touched_files[-1]  # patched last: the other files are written first
    res = subprocess.run(["chattr", "+i", str(tree / victim)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {res.stderr.strip() or res.returncode}")
    try:
        rc, out, err = run("apply", tree, capsys)
        line = one_error_line(err)
        assert rc == 1 and line == (
            f"error: cannot write {victim}: {os.strerror(errno.EPERM)}; {tree} is unchanged"
        )
        assert tree_digest(tree) == digest
    finally:
        subprocess.run(["chattr", "-i", str(tree / victim)], check=True)
    assert run("apply", tree, capsys)[0] == 0
    applied = tree_digest(tree)
    gone = s.overlay_files[-1]  # deleted last by revert
    subprocess.run(["chattr", "+i", str(tree / gone)], check=True)
    try:
        rc, out, err = run("revert", tree, capsys)
        line = one_error_line(err)
        assert rc == 1 and line.startswith(f"error: cannot write {gone}: ")
        assert tree_digest(tree) == applied
    finally:
        subprocess.run(["chattr", "-i", str(tree / gone)], check=True)
    assert run("revert", tree, capsys)[0] == 0
    assert tree_digest(tree) == digest


FULL_DISK = """
import resource, signal, sys
from dsv4warmup import journal
from dsv4warmup.__main__ import main

limit = int(sys.argv[1])


def full_from_the_first_tree_write(kind, rel):
    if kind == "write":
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
journal.fault_hook = full_from_the_first_tree_write
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("base", BASES)
def test_a_full_disk_is_refused_cleanly(base: str, tmp_path: Path) -> None:
    """RLIMIT_FSIZE from the first tree write on: no file may grow past the
    largest original (the journal is already written; the rollback fits), so
    the first new content larger than that fails with EFBIG, as on a full disk."""
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    order = _write_order(tree, base)
    contents = tree_mod.plan_apply(tree, series_mod.load(base))
    limit = max((tree / rel).stat().st_size for rel in order if (tree / rel).is_file())
    victim = next((rel for rel in order if len(contents[rel] or b"") > limit), None)
    if victim is None:
        pytest.skip("no new content outgrows every original")
    res = subprocess.run(
        [sys.executable, "-S", "-c", FULL_DISK, str(limit), "apply", "--tree", str(tree)],
        env=dict(os.environ, PYTHONPATH=str(REPO / "scripts")),
        capture_output=True,
        text=True,
    )
    line = one_error_line(res.stderr)
    assert res.returncode == 1 and line == (
        f"error: cannot write {victim}: {os.strerror(errno.EFBIG)}; {tree} is unchanged"
    )
    assert tree_digest(tree) == digest


@pytest.mark.parametrize("base", BASES)
def test_an_occupied_temp_path_is_refused_cleanly(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Portable (root or not): a folder where the last file's temp file goes."""
    tree = fresh(base, tmp_path)
    victim = _write_order(tree, base)[-1]
    blocker = journal.tmp_path(tree, victim)
    blocker.mkdir()
    (blocker / "keep").write_text("not ours\n")
    digest = tree_digest(tree)
    rc, out, err = run("apply", tree, capsys)
    line = one_error_line(err)
    assert rc == 1 and line == (
        f"error: cannot write {victim}: {os.strerror(errno.EISDIR)}; {tree} is unchanged"
    )
    assert tree_digest(tree) == digest


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = BASES[-1]
    tree = fresh(base, tmp_path)
    victim = _write_order(tree, base)[-1]
    digest = tree_digest(tree)
    folder = (tree / victim).parent
    folder.chmod(0o555)
    try:
        rc, out, err = run("apply", tree, capsys)
        line = one_error_line(err)
        assert rc == 1 and line.startswith(f"error: cannot write {victim}: ")
    finally:
        folder.chmod(0o755)
    assert tree_digest(tree) == digest


# --------------------------------------------------------------------------
# The journal writer on its own: folders, modes, a symlink


def test_writer_folders_modes_and_links_at_every_step(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "keep").mkdir()
    (root / "a.sh").write_bytes(b"#!/bin/sh\n")
    (root / "a.sh").chmod(0o750)
    (root / "sub" / "deep" / "b.txt").write_bytes(b"b\n")
    (root / "link").symlink_to("a.sh")
    change = {
        "a.sh": b"#!/bin/sh\necho changed\n",
        "link": b"now a file\n",
        "new/dir/c.txt": b"c\n",
        "sub/deep/b.txt": None,
        "keep/absent": None,
    }

    def snapshot() -> dict[str, object]:
        out: dict[str, object] = {}
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            body = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
            out[str(p.relative_to(root))] = (oct(st.st_mode), body)
        return out

    before = snapshot()
    with steps() as hook:
        assert journal.write(root, change) == ["a.sh", "link", "new/dir/c.txt", "sub/deep/b.txt"]
    kinds = [kind for kind, _ in hook.seen]
    assert kinds.count("mkdir") == 2 and kinds.count("rmdir") == 2
    after = snapshot()
    assert after["a.sh"] == (oct(0o100750), change["a.sh"])
    assert "sub" not in after and "new/dir/c.txt" in after
    undo = {"a.sh": b"#!/bin/sh\n", "new/dir/c.txt": None, "sub/deep/b.txt": b"b\n"}
    journal.write(root, undo)
    (root / "link").unlink()
    (root / "link").symlink_to("a.sh")
    assert snapshot() == before

    for k in range(1, len(hook.seen) + 1):
        with steps(k) as faulty:
            try:
                journal.write(root, change)
                assert faulty.seen[k - 1][0] == "journal-discard"
                journal.recover(root)
                journal.write(root, undo)
                (root / "link").unlink()
                (root / "link").symlink_to("a.sh")
            except journal.JournalError as e:
                assert str(e).endswith(f"{root} is unchanged"), (k, e)
        assert snapshot() == before, (k, faulty.seen[k - 1])


# --------------------------------------------------------------------------
# One run per tree


@pytest.mark.parametrize("base", BASES)
def test_one_run_per_tree(base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = fresh(base, tmp_path)
    digest = tree_digest(tree)
    flags = tmp_path / "flags"
    flags.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO / "scripts"),
        DSV4_TEST_FAULT="pause@3",  # holding the lock, the journal half-written
        DSV4_TEST_FAULT_DIR=str(flags),
    )
    cmd = [sys.executable, "-S", "-m", "dsv4warmup", "apply", "--tree", str(tree)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (flags / "paused").exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        holder = f"another dsv4warmup run (pid {first.pid})"
        for other in ("apply", "revert", "check"):
            rc, out, err = run(other, tree, capsys)
            assert rc == 1 and holder in one_error_line(err), (other, err)
        rc, out, err = run("status", tree, capsys)
        assert rc == 0 and f"state:   busy: {holder} is changing this tree" in out
    finally:
        (flags / "resume").touch()
        stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0 and b"applied the" in stdout, stderr
    assert tree_mod.detect(tree).state == "applied"
    assert run("revert", tree, capsys)[0] == 0
    assert tree_digest(tree) == digest

    # Racing plain runs: exactly one writes; the others wait, then find it applied.
    runs = [
        subprocess.Popen(
            cmd,
            env=dict(os.environ, PYTHONPATH=str(REPO / "scripts")),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [(p.communicate(timeout=300), p.returncode) for p in runs]
    results = [(rc, out, err) for (out, err), rc in results]
    for rc, _out, err in results:
        assert rc == 0 or (rc == 1 and "another dsv4warmup run" in err), err
    assert sum(out.startswith("applied the") for _, out, _ in results) == 1, results
    assert tree_mod.detect(tree).state == "applied"
    assert run("revert", tree, capsys)[0] == 0
    assert tree_digest(tree) == digest


# --------------------------------------------------------------------------
# The default tree, and the light set-up


def test_the_default_tree_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = sources.DEFAULT_BASE
    default = tmp_path / "build" / f"vllm-{base}"
    monkeypatch.setattr(cli_mod, "default_tree", lambda: default)

    assert cli(["status"]) == 0  # no tree yet: extracted once
    out, err = capsys.readouterr()
    assert "pristine (not applied)" in out and "fresh pristine" in err
    assert cli(["apply"]) == 0
    assert capsys.readouterr().out.startswith(f"applied the v{base} series")
    (default / "my-notes.txt").write_text("mine\n")
    applied = tree_digest(default)
    assert cli(["apply"]) == 0  # `make` again: kept, not re-extracted
    out, err = capsys.readouterr()
    assert out.startswith("already applied") and "fresh pristine" not in err
    assert tree_digest(default) == applied

    s = series_mod.load(base)
    target = default / s.patches[0].files[0]
    target.write_text("# rewritten by hand\n")
    edited = tree_digest(default)
    assert cli(["apply"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "is the default tree and keeps your edits" in line and "make clean" in line
    assert tree_digest(default) == edited


def test_patch_commands_need_only_the_standard_library() -> None:
    heavy = ("torch", "triton", "vllm", "numpy", "packaging", "transformers", "wheel")
    probe = (
        "import sys\n"
        "import dsv4warmup.__main__, dsv4warmup.tree, dsv4warmup.journal, dsv4warmup.pr\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n"
    )
    res = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env=dict(os.environ, PYTHONPATH=str(REPO / "scripts")),
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr
    make = ["make", "-n", "-B", "--no-print-directory", "-C", str(REPO)]
    light = subprocess.run(
        [*make, "apply", "check", "revert", "status", "fetch", "pr", "VLLM_DIR=/nowhere"],
        capture_output=True,
        text=True,
    )
    assert light.returncode == 0, light.stderr
    assert ".venv" not in light.stdout and "pip" not in light.stdout, light.stdout
    wheel = subprocess.run([*make, "wheel"], capture_output=True, text=True)
    assert ".venv" not in wheel.stdout and "--target .cache/tools/wheel" in wheel.stdout
