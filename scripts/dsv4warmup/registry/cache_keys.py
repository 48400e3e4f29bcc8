"""What each compile's disk-cache key is made of, written as JSON lines.

A cache baked on one machine is only read on another when every part of each
key agrees. :func:`record` logs, per compile request, the parts of Triton's
key (``get_cache_key``: ``triton_key()``, the source, backend and options
hashes, the cache-invalidating environment) and TileLang's
(``KernelCache._generate_key``: the kernel script's hash, target, backend,
pass configs, compile flags, base key), the final key, and saves each TileLang
kernel script by its hash, so two logs can be compared part by part
(:func:`compare`).

``python -m dsv4warmup.registry.cache_keys A.jsonl B.jsonl`` prints, per
backend, how many keys the two logs share and which parts differ.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock


def triton_kernel_name(src: Any) -> str:
    """The ``@triton.jit`` function's name of a compile's ``ASTSource``."""
    fn = getattr(getattr(src, "fn", None), "fn", None)
    return str(getattr(fn, "__qualname__", getattr(src, "name", "?")))


def tilelang_kernel_name(prim_func: Any) -> str:
    """A TileLang kernel's name: its ``PrimFunc``'s global symbol."""
    attrs = getattr(prim_func, "attrs", None) or {}
    return str(attrs.get("global_symbol", "?"))


@contextlib.contextmanager
def record(path: Path, build: bool = True) -> Iterator[None]:
    """While active, append one JSON line per Triton and TileLang cache key
    computed in this process to ``path``; TileLang kernel scripts go to
    ``path``'s folder as ``tilelang-<sha256>.py``. ``build=False``: TileLang
    builds nothing (every key answers as a disk-cache hit with a stand-in
    kernel), for comparing keys only."""
    from triton.compiler import compiler as triton_compiler

    path.parent.mkdir(parents=True, exist_ok=True)
    log = _LineLog(path.open("a"))
    real_triton_key_of = triton_compiler.get_cache_key

    def triton_key_of(src, backend, options, env_vars):  # type: ignore[no-untyped-def]
        from triton.runtime.cache import triton_key

        key = real_triton_key_of(src, backend, options, env_vars=env_vars)
        entry = {
            "backend": "triton",
            "kernel": triton_kernel_name(src),
            "key": hashlib.sha256(key.encode()).hexdigest(),
            "parts": {
                "triton_key": hashlib.sha256(triton_key().encode()).hexdigest(),
                "src": src.hash(),
                "backend": backend.hash(),
                "options": str(options.hash()),
                "env": str(sorted(env_vars.items())),
            },
        }
        log.write(entry)
        return key

    with contextlib.ExitStack() as stack:
        stack.callback(log.close)
        stack.enter_context(mock.patch.object(triton_compiler, "get_cache_key", triton_key_of))
        with contextlib.suppress(ImportError):
            stack.enter_context(_record_tilelang(log, path.parent))
            if not build:
                from tilelang.cache.kernel_cache import KernelCache

                stack.enter_context(
                    mock.patch.object(
                        KernelCache, "_load_kernel_from_disk", lambda *a, **k: object()
                    )
                )
        yield


class _LineLog:
    """JSON lines from several threads (Triton compiles keys in a pool), one
    whole line per entry."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


@contextlib.contextmanager
def _record_tilelang(log: _LineLog, folder: Path) -> Iterator[None]:
    from tilelang.cache.kernel_cache import KernelCache

    real = KernelCache._generate_key

    def generate_key(self, func, out_idx, execution_backend="tvm_ffi", args=None, **kw):  # type: ignore[no-untyped-def]
        key = real(self, func, out_idx, execution_backend, args, **kw)
        script = func.script(show_meta=True)
        script_sha = hashlib.sha256(script.encode()).hexdigest()
        (folder / f"tilelang-{script_sha}.py").write_text(script)
        parts = {
            "func": script_sha,
            "out_idx": repr(out_idx),
            "args": repr(tuple(repr(a) for a in (args or ()))),
            "execution_backend": str(execution_backend),
            "target": str(kw.get("target")),
            "target_host": str(kw.get("target_host")),
            "pass_configs": repr(
                sorted((str(k), repr(v)) for k, v in (kw.get("pass_configs") or {}).items())
            ),
            "compile_flags": repr(kw.get("compile_flags")),
            "base": json.dumps(KernelCache._get_base_key(), sort_keys=True),
        }
        log.write(
            {
                "backend": "tilelang",
                "kernel": tilelang_kernel_name(func),
                "key": key,
                "parts": parts,
            }
        )
        return key

    with mock.patch.object(KernelCache, "_generate_key", generate_key):
        yield


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Per backend: keys in both logs, keys only in ``b`` (what a server
    would build), and for those, which parts have no equal in ``a``
    (``{part: [values in b]}``)."""
    out: dict[str, Any] = {}
    for backend in sorted({e["backend"] for e in a + b}):
        ea = [e for e in a if e["backend"] == backend]
        eb = [e for e in b if e["backend"] == backend]
        keys_a = {e["key"] for e in ea}
        missing = [e for e in eb if e["key"] not in keys_a]
        parts_a: dict[str, set[str]] = {}
        for e in ea:
            for part, value in e["parts"].items():
                parts_a.setdefault(part, set()).add(value)
        differing: dict[str, list[str]] = {}
        for e in missing:
            for part, value in e["parts"].items():
                if value not in parts_a.get(part, set()):
                    differing.setdefault(part, [])
                    if value not in differing[part]:
                        differing[part].append(value)
        out[backend] = {
            "keys_a": len(keys_a),
            "keys_b": len({e["key"] for e in eb}),
            "b_not_in_a": len({e["key"] for e in missing}),
            "parts_of_b_unseen_in_a": differing,
            "a_values_of_those_parts": {p: sorted(parts_a.get(p, set())) for p in differing},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="log of the machine that baked the cache")
    parser.add_argument("b", type=Path, help="log of the machine that read it")
    args = parser.parse_args(argv)
    print(json.dumps(compare(load(args.a), load(args.b)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
