# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""TileLang warmup compiles handed to compiler processes: built there into
the disk cache, read here, counted as compiles; anything the processes
cannot do is compiled here. Runs real processes against a stand-in TileLang
(a package written to a temporary folder), without a GPU."""

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from vllm.model_executor.warmup.jit_warmup import count_compiles

# A disk cache keyed by the PrimFunc (here: a string) and the options; what
# each compile did is appended to log.jsonl.
_FAKE_TILELANG = {
    "tilelang/__init__.py": """
        import json, os, sys
        from pathlib import Path
        from tilelang import env
        from tilelang.jit.kernel import JITKernel

        with open(Path(env.TILELANG_CACHE_DIR) / "imports.log", "a") as f:
            f.write(str(os.getpid()) + "\\n")

        def _path(func, options):
            return Path(env.TILELANG_CACHE_DIR) / (func + "-" + options["target"])

        def compile(func, **options):
            options["target"] = str(options["target"] or "auto")
            if options["target"] == "auto":
                options["target"] = env.get_default_target()
            path = _path(func, options)
            if path.exists():
                return JITKernel(func, None, None, None, None, None, None, True)
            # TileLang compiles in JITKernel's constructor.
            kernel = JITKernel(func, None, None, None, None, None, None, False)
            behaviour = os.environ.get("FAKE_TILELANG_" + func, "")
            log = {"func": func, "pid": os.getpid(), "options": options,
                   "vllm_imported": "vllm" in sys.modules}
            with open(Path(env.TILELANG_CACHE_DIR) / "log.jsonl", "a") as f:
                f.write(json.dumps(log) + "\\n")
            in_compiler = os.getpid() != int(os.environ.get("FAKE_PARENT", "0"))
            if behaviour == "exit" and in_compiler:
                os._exit(3)
            if behaviour == "error":
                raise RuntimeError("nvcc failed for " + func)
            if behaviour == "elsewhere" and in_compiler:
                path = path.with_name(path.name + "-other-key")
            path.write_text(func)
            return kernel
    """,
    "tilelang/env.py": """
        import os
        TILELANG_CACHE_DIR = os.environ["TILELANG_CACHE_DIR"]
        def is_cache_enabled():
            return os.environ.get("FAKE_TILELANG_CACHE", "1") == "1"
        def get_default_target():
            return "cuda-sm90a"
    """,
    "tilelang/jit/__init__.py": "",
    "tilelang/jit/kernel.py": """
        class JITKernel:
            def __init__(self, func, out_idx, execution_backend, target,
                         target_host, verbose, pass_configs, from_database=False):
                self.func = func
                self.from_database = from_database
    """,
    "tilelang/backend/__init__.py": "",
    "tilelang/backend/target.py": """
        def determine_target(target, return_object=False):
            return target
    """,
    "tvm/__init__.py": "from tvm import ir",
    "tvm/ir.py": """
        import json
        def save_json(func):
            return json.dumps(func)
        def load_json(text):
            return json.loads(text)
    """,
}

OPTIONS = {
    "out_idx": None,
    "execution_backend": None,
    "target": None,
    "target_host": None,
    "verbose": False,
    "pass_configs": {"tl.disable_tma_lower": True},
    "compile_flags": None,
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    for name, text in _FAKE_TILELANG.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(textwrap.dedent(text))
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(cache))
    for name in list(sys.modules):
        if name.split(".")[0] in ("tilelang", "tvm"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(site))
    return cache


def _compiles(cache: Path) -> list[dict[str, Any]]:
    log = cache / "log.jsonl"
    return (
        [json.loads(line) for line in log.read_text().splitlines()]
        if log.exists()
        else []
    )


def _kernels(funcs: list[str]) -> tuple[list[Any], Any]:
    from vllm.model_executor.warmup.jit_warmup_tilelang_compiler import (
        tilelang_compiler_processes,
    )

    with count_compiles() as counts, tilelang_compiler_processes() as compilers:
        assert compilers is not None
        kernels = [compilers.kernel(func, dict(OPTIONS)) for func in funcs]
    return kernels, counts


def test_compiled_in_a_process_then_read_here(cache: Path) -> None:
    kernels, counts = _kernels(["a", "b"])

    compiles = _compiles(cache)
    assert [c["func"] for c in compiles] == ["a", "b"]
    # One process (the calling thread's) built both, not this one.
    assert len({c["pid"] for c in compiles}) == 1
    assert compiles[0]["pid"] != os.getpid()
    # Importing vLLM would add seconds to each process's start.
    assert not compiles[0]["vllm_imported"]
    # With the target and pass configs this process would use.
    assert compiles[0]["options"]["target"] == "cuda-sm90a"
    assert compiles[0]["options"]["pass_configs"] == {"tl.disable_tma_lower": True}
    assert [k.from_database for k in kernels] == [True, True]
    assert counts.compiled == {"tilelang": 2} and counts.loaded == {}


def _processes(cache: Path) -> set[str]:
    """The other processes that imported TileLang (compiler processes)."""
    pids = (cache / "imports.log").read_text().split()
    return set(pids) - {str(os.getpid())}


def test_warm_cache_is_read_without_a_process(cache: Path) -> None:
    _kernels(["a"])
    before = _compiles(cache)
    assert len(_processes(cache)) == 1

    kernels, counts = _kernels(["a"])

    assert _compiles(cache) == before
    assert len(_processes(cache)) == 1  # none started
    assert kernels[0].from_database
    assert counts.compiled == {} and counts.loaded == {"tilelang": 1}


def test_failed_compile_is_compiled_again_here_and_raises(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TILELANG_bad", "error")

    with pytest.raises(RuntimeError, match="nvcc failed for bad"):
        _kernels(["bad"])

    pids = [c["pid"] for c in _compiles(cache)]
    assert len(pids) == 2 and pids[0] != os.getpid() and pids[1] == os.getpid()


@pytest.mark.parametrize(
    ("behaviour", "warning"),
    [
        ("exit", "compiler process exited (code 3)"),
        # built, but under another cache key than this process computes
        ("elsewhere", "not where this process looks it up"),
    ],
)
def test_after_a_process_fails_the_rest_compile_here(
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    behaviour: str,
    warning: str,
) -> None:
    monkeypatch.setenv("FAKE_TILELANG_odd", behaviour)  # in a compiler process
    monkeypatch.setenv("FAKE_PARENT", str(os.getpid()))

    kernels, counts = _kernels(["odd", "c"])

    compiles = _compiles(cache)
    assert [(c["func"], c["pid"] == os.getpid()) for c in compiles] == [
        ("odd", False),
        ("odd", True),
        ("c", True),
    ]
    assert [k.from_database for k in kernels] == [False, False]
    assert counts.compiled == {"tilelang": 2}
    assert warning in caplog.text


def test_no_processes_without_a_disk_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.model_executor.warmup.jit_warmup_tilelang_compiler import (
        tilelang_compiler_processes,
    )

    monkeypatch.setenv("FAKE_TILELANG_CACHE", "0")
    with tilelang_compiler_processes() as compilers:
        assert compilers is None


class _ElaboratingJit:
    """The parts of tilelang's JITImpl the warmup pool uses."""

    def __init__(self) -> None:
        self._kernel_cache: dict[Any, Any] = {}
        self.func = self
        for name, value in OPTIONS.items():
            setattr(self, name, value)

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        return args, None

    def get_tir(self, name: str) -> str:
        return name


def test_warmup_pool_compiles_through_the_processes(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper

    monkeypatch.setattr(helper.current_platform, "is_cuda", lambda: True)
    monkeypatch.setenv("VLLM_TILELANG_JIT_WARMUP_NUM_THREADS", "2")
    jit = _ElaboratingJit()

    def compile_all() -> None:
        for name in ("a", "b", "c"):
            helper.compile_tilelang(jit, name)

    with count_compiles() as counts:
        helper.compile_tilelang_warmup(compile_all, 3)

    compiles = _compiles(cache)
    assert sorted(c["func"] for c in compiles) == ["a", "b", "c"]
    assert os.getpid() not in {c["pid"] for c in compiles}
    assert sorted(jit._kernel_cache) == [("a",), ("b",), ("c",)]
    assert counts.compiled == {"tilelang": 3}
