"""Generated trees the tests and the audit import: pristine and patched copies
of a base under ``build/trees/``, regenerated when the series changes."""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

from . import series as series_mod
from . import sources, tree
from .paths import BUILD, OVERLAY


def series_digest(base: str) -> str:
    s = series_mod.load(base)
    h = hashlib.sha256()
    for patch in s.patches:
        h.update(patch.path.read_bytes())
        for rel in patch.overlay:
            h.update(rel.encode() + (OVERLAY / rel).read_bytes())
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
        sources.extract(base, dest)
        if patched:
            tree.apply(dest)
        stamp.write_text(want)
    return dest


def patched_tree(base: str) -> Path:
    return _generated(f"vllm-{base}-patched", base, patched=True)


def pristine_tree(base: str) -> Path:
    return _generated(f"vllm-{base}-pristine", base, patched=False)
