"""Generated trees the tests and the audit import: pristine and patched copies
of a base under ``build/trees/``, regenerated when the series changes."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import series as series_mod
from . import sources, toolchains, tree
from .paths import BUILD, REPO
from .tree import declared_version


def series_digest(base: str) -> str:
    s = series_mod.load(base)
    h = hashlib.sha256()
    for patch in s.patches:
        h.update(patch.path.read_bytes())
        for rel in patch.overlay:
            h.update(rel.encode() + patch.overlay_bytes(rel))
    return h.hexdigest()


def _generated(name: str, base: str, patched: bool) -> Path:
    root = BUILD / "trees"
    root.mkdir(parents=True, exist_ok=True)
    dest = root / name
    stamp = root / f"{name}.stamp"
    want = series_digest(base) if patched else sources.SDIST_SHA256[base]
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == want and dest.is_dir():
            return dest
        # Built beside and swapped in: a process still reading the old tree
        # (a test of another worker) never sees a half-written one.
        fresh = root / f".{name}.new"
        sources.extract(base, fresh)
        if patched:
            tree.apply(fresh)
        stale = root / f".{name}.old"
        shutil.rmtree(stale, ignore_errors=True)
        if dest.exists():
            dest.rename(stale)
        fresh.rename(dest)
        stamp.write_text(want)
        shutil.rmtree(stale, ignore_errors=True)
    return dest


def patched_tree(base: str) -> Path:
    return _generated(f"vllm-{base}-patched", base, patched=True)


def pristine_tree(base: str) -> Path:
    return _generated(f"vllm-{base}-pristine", base, patched=False)


def python_env(tree: Path, toolchain: list[Path] | None = None) -> dict[str, str]:
    """Environment of an interpreter that imports ``tree``'s vLLM (and this
    package). ``toolchain``: folders put first on ``PYTHONPATH`` instead of the
    tree's base's (``toolchains``)."""
    env = dict(os.environ, DSV4_VLLM_TREE=str(tree))
    # The trees are generated folders: let each interpreter leave their
    # bytecode for the next (recompiling vLLM's modules is ~1 s of every import).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # vLLM caches model inspection per model class, hashed over the model's
    # package: pristine and patched trees would evict each other's entries.
    env.setdefault("VLLM_CACHE_ROOT", str(tree.parent / f"{tree.name}.vllm-cache"))
    if toolchain is None:
        version = declared_version(tree) or ""
        toolchain = toolchains.extra_python_path(version.split("+")[0])
    extra = [str(p) for p in toolchain]
    env["PYTHONPATH"] = os.pathsep.join([*extra, str(tree), str(REPO / "scripts")])
    return env


def json_from_tree(tree: Path, *python_args: str, toolchain: list[Path] | None = None) -> Any:
    """``python *python_args`` in a fresh interpreter that imports ``tree``'s
    vLLM (and this package): its last stdout line, parsed as JSON. Two trees
    cannot share one process. ``toolchain``: folders put first on
    ``PYTHONPATH`` instead of the tree's base's (``toolchains``)."""
    env = python_env(tree, toolchain)
    res = subprocess.run([sys.executable, *python_args], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        what = " ".join(python_args)[:60]
        raise RuntimeError(f"python {what} on {tree} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])
