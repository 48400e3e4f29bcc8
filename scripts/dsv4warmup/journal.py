"""Crash-safe writes to a source tree: a lock, a journal, and recovery.

A run that changes a tree holds ``<tree>/.dsv4-warmup.lock`` (``flock``) and,
before its first write, commits a journal ``<tree>/.dsv4-warmup-journal/``: a
manifest naming every file it changes (sha256 before and after, mode), the
folders it creates or removes, and a copy of each original file. The journal is
written under a temporary name and renamed into place, so it is either absent
or complete. Each file then goes in through a temp file of a fixed name
(``.<name>.dsv4-warmup-tmp``, beside it) renamed over it.

On any OSError the run restores every original and removes its temp files. A
run killed outright leaves the journal; the next apply or revert rolls it back
before doing its own work. Once a run ends, the journal and the lock are gone,
so a finished tree holds exactly what the series says and nothing else.

Only the standard library: ``make apply`` runs without the heavy test venv.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

JOURNAL = ".dsv4-warmup-journal"
LOCK = ".dsv4-warmup.lock"
TMP_SUFFIX = ".dsv4-warmup-tmp"
# A journal still being written (the run has changed nothing yet), and the
# journal of a finished run being removed: both are only ever deleted.
_NEW = JOURNAL + ".new"
_DONE = JOURNAL + ".done"
MANIFEST = "manifest.json"
NEW_FILE_MODE = 0o644
# fsync makes the journal outlive a power cut, not just a kill; the fault-
# injection tests turn it off (DSV4_NO_FSYNC=1) for speed, nothing else does.
FSYNC = os.environ.get("DSV4_NO_FSYNC") != "1"


class JournalError(RuntimeError):
    """A write the OS refused, a busy tree, or a journal that cannot be rolled back."""


# --------------------------------------------------------------------------
# Fault injection, for the tests: every change to a tree goes through _step().
# ``fault_hook(kind, rel)`` is called first (in-process tests raise from it);
# ``DSV4_TEST_FAULT=<action>@<n>`` acts at the n-th step of the process:
# ``raise`` (EIO), ``kill`` (SIGKILL), ``term`` (SIGTERM), or ``pause`` (touch
# ``$DSV4_TEST_FAULT_DIR/paused``, then wait for ``$DSV4_TEST_FAULT_DIR/resume``).

FaultHook = Callable[[str, str], None]
fault_hook: FaultHook | None = None
_env_steps = 0


def _step(kind: str, rel: str) -> None:
    if fault_hook is not None:
        fault_hook(kind, rel)
    spec = os.environ.get("DSV4_TEST_FAULT")
    if spec:
        _env_fault(spec, rel)


def _env_fault(spec: str, rel: str) -> None:
    global _env_steps
    _env_steps += 1
    action, _, at = spec.partition("@")
    if int(at) != _env_steps:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    elif action == "raise":
        raise OSError(errno.EIO, "injected fault", rel)
    elif action == "pause":
        folder = Path(os.environ["DSV4_TEST_FAULT_DIR"])
        (folder / "paused").write_text(str(os.getpid()))
        deadline = time.monotonic() + 120
        while not (folder / "resume").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


# --------------------------------------------------------------------------
# The journal


@dataclass
class Entry:
    path: str
    old_sha256: str | None  # None: the file did not exist
    new_sha256: str | None  # None: the run deletes it
    mode: int | None = None  # the original's permission bits
    link: str | None = None  # the original was a symlink to this


@dataclass
class Journal:
    base: str
    direction: str  # apply | revert | write
    entries: list[Entry]
    made_dirs: list[str] = field(default_factory=list)  # created, parents first
    removed_dirs: list[tuple[str, int]] = field(default_factory=list)  # (rel, mode), children first
    pid: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Journal:
        raw = json.loads(text)
        return cls(
            base=raw["base"],
            direction=raw["direction"],
            entries=[Entry(**e) for e in raw["entries"]],
            made_dirs=list(raw["made_dirs"]),
            removed_dirs=[(rel, int(mode)) for rel, mode in raw["removed_dirs"]],
            pid=int(raw["pid"]),
        )

    @property
    def what(self) -> str:
        """``apply of v0.26.0``: for messages."""
        return f"{self.direction} of v{self.base}" if self.base else self.direction


def tmp_path(tree: Path, rel: str) -> Path:
    dst = tree / rel
    return dst.parent / f".{dst.name}{TMP_SUFFIX}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _why(err: OSError) -> str:
    return err.strerror or str(err)


def _fsync_dir(path: Path) -> None:
    if not FSYNC:
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        if FSYNC:
            os.fsync(fd)
    finally:
        os.close(fd)


def file_state(tree: Path, e: Entry) -> str:
    """'old', 'new' or 'other': where one journaled file stands."""
    p = tree / e.path
    try:
        st = p.lstat()
    except FileNotFoundError:
        return "old" if e.old_sha256 is None else "new" if e.new_sha256 is None else "other"
    except NotADirectoryError:
        return "other"
    if stat.S_ISLNK(st.st_mode):
        return "old" if e.link is not None and os.readlink(p) == e.link else "other"
    if not stat.S_ISREG(st.st_mode):
        return "other"
    digest = _sha256(p.read_bytes())
    if e.link is None and digest == e.old_sha256 and stat.S_IMODE(st.st_mode) == e.mode:
        return "old"
    return "new" if digest == e.new_sha256 else "other"


def progress(tree: Path, journal: Journal) -> int:
    """How many of the journaled files hold their new content."""
    return sum(file_state(tree, e) == "new" for e in journal.entries)


# --------------------------------------------------------------------------
# Planning a write


def _changes(tree: Path, contents: Mapping[str, bytes | None]) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for rel, data in contents.items():
        dst = tree / rel
        if data is None:
            if os.path.lexists(dst):
                out[rel] = None
        elif not (dst.is_file() and not dst.is_symlink() and dst.read_bytes() == data):
            out[rel] = data
    return out


def _made_dirs(tree: Path, changes: Mapping[str, bytes | None]) -> list[str]:
    made: dict[str, None] = {}
    for rel, data in changes.items():
        if data is None:
            continue
        missing = []
        parent = (tree / rel).parent
        while parent != tree and not parent.is_dir():
            missing.append(str(parent.relative_to(tree)))
            parent = parent.parent
        for d in reversed(missing):
            made.setdefault(d, None)
    return list(made)


def _removed_dirs(tree: Path, changes: Mapping[str, bytes | None]) -> list[tuple[str, int]]:
    """Folders the deletions leave empty, deepest first (as the old writer did)."""
    gone = {tree / rel for rel, data in changes.items() if data is None}
    candidates: set[Path] = set()
    for p in gone:
        parent = p.parent
        while parent != tree:
            candidates.add(parent)
            parent = parent.parent
    removed: list[tuple[str, int]] = []
    for d in sorted(candidates, key=lambda p: len(p.parts), reverse=True):
        if d.is_dir() and not d.is_symlink() and all(c in gone for c in d.iterdir()):
            gone.add(d)
            removed.append((str(d.relative_to(tree)), stat.S_IMODE(d.stat().st_mode)))
    return removed


def _entry(tree: Path, rel: str, data: bytes | None) -> tuple[Entry, bytes | None]:
    """The journal entry of one change, and the original bytes to keep."""
    new = None if data is None else _sha256(data)
    p = tree / rel
    if p.is_symlink():  # restored as a link; "" keeps it apart from "did not exist"
        return Entry(rel, "", new, link=os.readlink(p)), None
    if not p.exists():
        return Entry(rel, None, new), None
    old = p.read_bytes()
    return Entry(rel, _sha256(old), new, mode=stat.S_IMODE(p.stat().st_mode)), old


def _begin(tree: Path, journal: Journal, originals: list[bytes | None]) -> None:
    """Commit the journal: written in full under a temporary name, then renamed."""
    new = tree / _NEW
    _step("journal", _NEW)
    shutil.rmtree(new, ignore_errors=True)
    (new / "orig").mkdir(parents=True)
    for i, data in enumerate(originals):
        if data is not None:
            _step("journal", f"{_NEW}/orig/{i}")
            _write_file(new / "orig" / str(i), data, 0o600)
    _step("journal", f"{_NEW}/{MANIFEST}")
    _write_file(new / MANIFEST, journal.to_json().encode(), 0o600)
    _fsync_dir(new / "orig")
    _fsync_dir(new)
    _step("journal-commit", JOURNAL)
    os.rename(new, tree / JOURNAL)
    _fsync_dir(tree)


def _finish(tree: Path) -> None:
    """The run is complete once its journal is renamed away; the rest is tidying."""
    _step("journal-close", JOURNAL)
    shutil.rmtree(tree / _DONE, ignore_errors=True)
    os.rename(tree / JOURNAL, tree / _DONE)
    _fsync_dir(tree)


def _tidy(tree: Path) -> None:
    """Remove a finished journal; a leftover is removed by the next run."""
    try:
        _step("journal-discard", _DONE)
        shutil.rmtree(tree / _DONE)
    except OSError:
        pass


# --------------------------------------------------------------------------
# Writing, with rollback


def write(
    tree: Path, contents: Mapping[str, bytes | None], base: str = "", direction: str = "write"
) -> list[str]:
    """Give each file its new content (None: delete it), all or nothing.

    Returns the files changed. On an OSError, Ctrl-C, SIGTERM or SIGHUP every
    file is restored and every temp file removed, then JournalError names the
    file and the reason.
    """
    if (tree / JOURNAL).exists():
        raise JournalError(f"{tree} holds the journal of an interrupted run; recover it first")
    changes = _changes(tree, contents)
    if not changes:
        return []
    pairs = [_entry(tree, rel, data) for rel, data in changes.items()]
    journal = Journal(
        base,
        direction,
        [e for e, _ in pairs],
        _made_dirs(tree, changes),
        _removed_dirs(tree, changes),
        os.getpid(),
    )
    with _interruptible():
        try:
            _begin(tree, journal, [orig for _, orig in pairs])
        except (OSError, KeyboardInterrupt) as e:
            shutil.rmtree(tree / _NEW, ignore_errors=True)
            raise JournalError(
                f"{_what_failed(e, f'the journal {tree / JOURNAL}')}; {tree} is unchanged"
            ) from None
        cursor = [""]
        try:
            _change(tree, journal, changes, cursor)
        except (OSError, KeyboardInterrupt) as e:
            _fail(tree, journal, cursor[0], e)
    _tidy(tree)
    return list(changes)


def _change(
    tree: Path, journal: Journal, changes: Mapping[str, bytes | None], cursor: list[str]
) -> None:
    """The writes proper; ``cursor[0]`` names what is being written."""
    for rel in journal.made_dirs:
        cursor[0] = rel
        _step("mkdir", rel)
        os.mkdir(tree / rel)
    for entry in journal.entries:
        cursor[0] = entry.path
        data = changes[entry.path]
        if data is None:
            _step("unlink", entry.path)
            os.unlink(tree / entry.path)
        else:
            _replace(tree, entry.path, data, NEW_FILE_MODE if entry.mode is None else entry.mode)
    for rel, _mode in journal.removed_dirs:
        cursor[0] = rel
        _step("rmdir", rel)
        os.rmdir(tree / rel)
    for d in sorted({(tree / rel).parent for rel in changes} | {tree}):
        if d.is_dir():
            _fsync_dir(d)
    cursor[0] = f"the journal {tree / JOURNAL}"
    _finish(tree)


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP (a CI timeout, a closed terminal) raise as SIGINT
    does, so a run rolls back at once rather than leave a journal behind."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    saved: dict[int, object] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            saved[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread: leave the signals alone
        pass
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _what_failed(err: BaseException, what: str) -> str:
    if isinstance(err, OSError):
        return f"cannot write {what}: {_why(err)}"
    return f"interrupted ({str(err) or 'SIGINT'}) while writing {what}"


def _replace(tree: Path, rel: str, data: bytes, mode: int, kind: str = "") -> None:
    tmp = tmp_path(tree, rel)
    _step(f"{kind}write", rel)
    _write_file(tmp, data, mode)
    _step(f"{kind}rename", rel)
    os.replace(tmp, tree / rel)


def _fail(tree: Path, journal: Journal, rel: str, err: BaseException) -> None:
    try:
        rollback(tree, journal)
    except (OSError, JournalError, KeyboardInterrupt) as again:
        why = _why(again) if isinstance(again, OSError) else str(again) or "interrupted"
        raise JournalError(
            f"{_what_failed(err, rel)}; rolling back failed too ({why}): "
            f"{tree / JOURNAL} keeps the originals; once that is fixed, "
            "`make apply` or `make revert` finishes the rollback"
        ) from None
    raise JournalError(f"{_what_failed(err, rel)}; {tree} is unchanged") from None


def rollback(tree: Path, journal: Journal) -> None:
    """Put back every original, remove temp files and created folders, then
    the journal. Idempotent: a rollback that is itself killed is redone."""
    for e in journal.entries:
        # The writer only ever leaves a file old or new: anything else is a user's edit.
        if file_state(tree, e) == "other":
            raise JournalError(
                f"{e.path} changed since the interrupted run (it holds neither its original "
                f"nor its new content); its original is in {tree / JOURNAL}/orig, "
                "restore or keep it by hand, then remove that folder"
            )
    for rel, mode in reversed(journal.removed_dirs):
        d = tree / rel
        if not d.is_dir():
            _step("undo-mkdir", rel)
            os.mkdir(d)
            os.chmod(d, mode)
    orig = tree / JOURNAL / "orig"
    for i, e in enumerate(journal.entries):
        tmp = tmp_path(tree, e.path)
        if tmp.is_file() or tmp.is_symlink():
            _step("undo-unlink", str(tmp.relative_to(tree)))
            os.unlink(tmp)
        if file_state(tree, e) == "old":
            continue
        dst = tree / e.path
        if e.old_sha256 is None:
            _step("undo-unlink", e.path)
            os.unlink(dst)
        elif e.link is not None:
            _step("undo-link", e.path)
            os.symlink(e.link, tmp)
            os.replace(tmp, dst)
        else:
            data = (orig / str(i)).read_bytes()
            if _sha256(data) != e.old_sha256:
                raise JournalError(f"the journal's copy of {e.path} is damaged")
            _replace(tree, e.path, data, NEW_FILE_MODE if e.mode is None else e.mode, kind="undo-")
    for rel in reversed(journal.made_dirs):
        d = tree / rel
        if d.is_dir() and not any(d.iterdir()):
            _step("undo-rmdir", rel)
            os.rmdir(d)
    for d in sorted({(tree / e.path).parent for e in journal.entries} | {tree}):
        if d.is_dir():
            _fsync_dir(d)
    _finish(tree)
    _tidy(tree)


# --------------------------------------------------------------------------
# What a killed run left, and recovery


@dataclass
class Pending:
    journal: Journal | None  # committed: the run may have written files
    leftovers: list[str]  # temp / finished journals, a stale lock: nothing to roll back


def load(tree: Path) -> Journal | None:
    manifest = tree / JOURNAL / MANIFEST
    if not (tree / JOURNAL).exists():
        return None
    try:
        return Journal.from_json(manifest.read_text())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise JournalError(
            f"the journal {tree / JOURNAL} of an interrupted run is unreadable ({e}); "
            "check the files it names against its orig/ copies, then remove it by hand"
        ) from None


def pending(tree: Path) -> Pending:
    """A read-only look for what an interrupted run left."""
    leftovers = [name for name in (_NEW, _DONE) if (tree / name).exists()]
    if lock_state(tree)[0] == "stale":
        leftovers.append(LOCK)
    return Pending(load(tree), leftovers)


def describe(tree: Path, journal: Journal) -> str:
    """``interrupted apply of v0.26.0 at file 4 of 17``."""
    n = len(journal.entries)
    done = progress(tree, journal)
    where = f"at file {done + 1} of {n}" if done < n else f"after the last of its {n} files"
    return f"interrupted {journal.what} {where}"


def recover(tree: Path) -> list[str]:
    """With the lock held: roll back a killed run's journal and remove what
    such runs leave. Returns what was done, for the user."""
    notes: list[str] = []
    journal = load(tree)
    if journal is not None:
        said = describe(tree, journal)
        try:
            rollback(tree, journal)
        except OSError as e:
            raise JournalError(
                f"cannot roll back the {said}: {e.filename or ''} {_why(e)}; "
                f"{tree / JOURNAL} keeps the originals"
            ) from None
        notes.append(f"recovered an {said}: rolled it back; {tree} is as it was before that run")
    for name in (_NEW, _DONE):
        if (tree / name).exists():
            shutil.rmtree(tree / name)
            notes.append(
                f"removed {name}, left by an interrupted run "
                + ("that had written nothing" if name == _NEW else "that had finished")
            )
    return notes


# --------------------------------------------------------------------------
# One run per tree


def lock_state(tree: Path) -> tuple[str, int | None]:
    """('free' | 'held' | 'stale', holder's pid): a read-only look."""
    try:
        fd = os.open(tree / LOCK, os.O_RDONLY)
    except OSError:
        return "free", None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "held", _pid(fd)
    finally:
        os.close(fd)
    return "stale", None


def _pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or "x")
    except (OSError, ValueError):
        return None


@contextmanager
def locked(tree: Path, wait: float = 1.0) -> Iterator[None]:
    """Hold the tree's lock; JournalError if another run keeps it past ``wait`` s.

    The lock file is removed on release, so a waiter may lock a file that is no
    longer there: it checks and retries."""
    path = tree / LOCK
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise JournalError(f"cannot lock {tree}: {LOCK}: {_why(e)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _pid(fd)
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            who = f" (pid {pid})" if pid else ""
            raise JournalError(
                f"another dsv4warmup run{who} holds {tree}; wait for it to finish, then run again"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)
