"""`make pr`: per PR a `git am` branch and a body, after vLLM's own checks.

Synthetic series (tmp dirs, passed through DSV4_PATCHES_DIR / DSV4_OVERLAY_DIR
to a subprocess) against the real 0.26.0 sdist check the dependency
statement (by AST, never by prose), grouping, the body's disclosure and
measured figures, the human sign-off, and that the checker refuses what vLLM's
hooks refuse. The hook runner's blame logic and the AST analysis are tested in
process on tiny inputs. The real newest series is checked once (without mypy,
which needs minutes: `make pr` runs it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dsv4warmup import pr as pr_mod
from dsv4warmup import pr_body, pr_code, pr_hooks, sources
from dsv4warmup import series as series_mod
from helpers import git

REPO = Path(__file__).resolve().parents[2]
JANE = "Jane Doe <jane@example.com>"
SPARSE = "vllm/models/deepseek_v4/sparse_mla.py"
CACHE_UTILS = "vllm/models/deepseek_v4/common/ops/cache_utils.py"
MTP_NORM = "vllm/models/deepseek_v4/common/ops/fused_mtp_input_rmsnorm.py"
SPEC_UTILS = "vllm/v1/spec_decode/utils.py"
KERNEL_WARMUP = "vllm/model_executor/warmup/kernel_warmup.py"
OLD_SECTIONS = ("## Purpose", "## Test Plan", "## Test Result")
NO_MYPY = "mypy-3.10,mypy-3.11,mypy-3.12,mypy-3.13,mypy"


def sections_of(body: str, heads: tuple[str, ...] = OLD_SECTIONS) -> dict[str, str]:
    out: dict[str, str] = {}
    for head in heads:
        assert head in body, head
        text = body.split(head, 1)[1]
        out[head] = re.split(r"^(?:## |---$)", text, maxsplit=1, flags=re.MULTILINE)[0].strip()
    return out


# --------------------------------------------------------------------------
# Synthetic series against the real 0.26.0 sdist


def make_series(tmp: Path, patches: list[dict], base: str = "0.26.0") -> tuple[Path, Path]:
    """patches: dicts with subject, trailers, append {path: text}, replace
    {path: (old, new)}, overlay {path: text}."""
    paths = sorted(
        {p for spec in patches for p in [*spec.get("append", {}), *spec.get("replace", {})]}
    )
    pristine = sources.read_members(base, paths)
    dev = tmp / "dev"
    for rel, data in pristine.items():
        assert data is not None, rel
        (dev / rel).parent.mkdir(parents=True, exist_ok=True)
        (dev / rel).write_bytes(data)
    git(dev, "init", "-q")
    git(dev, "add", "-A")
    git(dev, "commit", "-q", "-m", "pristine")
    series_dir = tmp / "patches" / f"v{base}"
    series_dir.mkdir(parents=True)
    overlay = tmp / "overlay"
    overlay.mkdir()
    lines = []
    for number, spec in enumerate(patches, 1):
        for rel, text in spec.get("append", {}).items():
            with open(dev / rel, "a") as f:
                f.write(text)
        for rel, (old, new) in spec.get("replace", {}).items():
            content = (dev / rel).read_text()
            assert content.count(old) == 1, old
            (dev / rel).write_text(content.replace(old, new))
        msg = f"{spec['subject']}\n\nWhy this matters, in a few words."
        if spec.get("trailers"):
            msg += "\n\n" + "\n".join(spec["trailers"])
        git(dev, "commit", "-q", "-a", "-s", "-m", msg)
        name = f"{number:04d}-{spec.get('slug', f'change-{number}')}.patch"
        mail = git(dev, "format-patch", "-1", "--stdout", "--zero-commit", "--full-index", "HEAD")
        (series_dir / name).write_text(mail)
        lines.append(name)
        for rel, text in spec.get("overlay", {}).items():
            (overlay / rel).parent.mkdir(parents=True, exist_ok=True)
            (overlay / rel).write_text(text)
            lines.append(f"  + {rel}")
    (series_dir / "series").write_text("\n".join(lines) + "\n")
    return tmp / "patches", overlay


def run_pr(
    patches: Path,
    overlay: Path,
    out: Path,
    results: Path,
    signoff: str | None = JANE,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        DSV4_PATCHES_DIR=str(patches),
        DSV4_OVERLAY_DIR=str(overlay),
        PYTHONPATH=str(REPO / "scripts"),
        SKIP=NO_MYPY,
        **(env_extra or {}),
    )
    env.pop("SIGNOFF", None)
    args = ["--base", "0.26.0", "--out", str(out), "--results", str(results)]
    if signoff:
        args += ["--signoff", signoff]
    return subprocess.run(
        [sys.executable, "-m", "dsv4warmup", "pr", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )


SPDX = "# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: Copyright contributors to the vLLM project\n"
KEYS_MODULE = SPDX + textwrap.dedent('''\
    """Toy warmup keys."""


    def toy_keys() -> list[int]:
        return [1, 16]
    ''')
GUARD = textwrap.dedent('''\


    def _toy_c128a_guard(i: int, n: int) -> bool:
        """Bounds guard for _build_c128a_topk_metadata_kernel indices."""
        return 0 <= i < n


    _TOY_GUARD_OK = _toy_c128a_guard(0, 1)
    ''')
# Defines a nested ``first`` (local, never a dependency) and uses the keys.
USES_KEYS = textwrap.dedent("""\


    def _toy_warmup_keys() -> list[int]:
        from vllm.model_executor.warmup.toy_keys import toy_keys

        def first(keys: list[int]) -> int:
            return keys[0]

        return [first(toy_keys())]
    """)
STARTUP = textwrap.dedent("""\


    def _toy_startup() -> int:
        from vllm.models.deepseek_v4.common.ops.cache_utils import _toy_warmup_keys

        return len(_toy_warmup_keys())


    _TOY_STARTUP = _toy_startup
    """)
NORM = textwrap.dedent("""\


    def _toy_norm_cases() -> list[int]:
        from vllm.model_executor.warmup import toy_keys as tk

        return [*tk.toy_keys(), 2]


    _TOY_NORM = _toy_norm_cases
    """)
# Says "first", "_toy_warmup_keys" and "toy_keys" in prose and strings only.
PROSE = textwrap.dedent('''\


    def _toy_first_note() -> str:
        """The first call compiles; see _toy_warmup_keys and toy_keys."""
        # first: toy_keys() is warmed before the first request
        return "first toy_keys _toy_warmup_keys"


    _TOY_NOTE = _toy_first_note
    ''')
AFTER = textwrap.dedent("""\


    def _toy_after() -> tuple[int, ...]:
        return (1, 2, 16)


    _TOY_AFTER = _toy_after
    """)
RESULTS = textwrap.dedent("""\
    # GPU results

    Measured on a patched vLLM 0.26.0 tree, one H200.

    ## Status

    | check | status |
    |---|---|
    | c128a guard overhead | **-1.0 %**; outputs identical on valid input |
    | mHC warmup | 0 compiles |

    ## `_build_c128a_topk_metadata_kernel`

    first request 812 ms -> 95 ms; 0 compiles after warmup.

    ## Toy: count the RMSNorm cases

    | keys | compiles |
    |---|---|
    | 3 | 0 |

    ## Something else

    nothing to see.
    """)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("good")
    patches, overlay = make_series(
        tmp,
        [
            {
                "subject": "[Bugfix] Toy: guard the c128a indices",
                "slug": "guard",
                "append": {SPARSE: GUARD},
                "replace": {
                    SPARSE: (
                        "    if num_tokens == 0:\n        return global_decode,",
                        "    if num_tokens <= 0:\n        return global_decode,",
                    )
                },
            },
            {
                "subject": "[Kernel] Toy: warm up with the keys",
                "slug": "keys",
                "append": {CACHE_UTILS: USES_KEYS},
                "overlay": {"vllm/model_executor/warmup/toy_keys.py": KEYS_MODULE},
                "trailers": ["PR: toy-warmup"],
            },
            {
                "subject": "[Kernel] Toy: use the keys at startup",
                "slug": "startup",
                "append": {MTP_NORM: STARTUP},
                "trailers": ["PR: toy-warmup [Kernel] Toy: warm up the toy kernels"],
            },
            {
                "subject": "[Spec Decode] Toy: count the RMSNorm cases",
                "slug": "norm",
                "append": {SPEC_UTILS: NORM},
                "overlay": {
                    "tests/toy/test_toy_norm.py": SPDX
                    + "\n\ndef test_toy() -> None:\n    assert 1 + 1 == 2\n"
                },
            },
            # Same file as 0001, another place: applies alone, no dependency.
            {
                "subject": "[Kernel] Toy: name the alignment",
                "slug": "align",
                "replace": {
                    SPARSE: (
                        "_C128A_TOPK_ALIGNMENT = 128\n",
                        "_C128A_TOPK_ALIGNMENT = 128  # width pad\n",
                    )
                },
            },
            {
                "subject": "[Misc] Toy: note the first call",
                "slug": "first",
                "append": {KERNEL_WARMUP: PROSE},
            },
            # Appends after 0002's lines without using them: a textual dependency.
            {
                "subject": "[Kernel] Toy: after the keys",
                "slug": "after",
                "append": {CACHE_UTILS: AFTER},
            },
        ],
    )
    (tmp / "gpu-results.md").write_text(RESULTS)
    out = tmp / "out"
    res = run_pr(patches, overlay, out, tmp / "gpu-results.md")
    assert res.returncode == 0, res.stderr
    return out / "v0.26.0", res.stdout, res.stderr


def test_dependencies_come_from_code_not_prose(good) -> None:
    _, stdout, stderr = good
    assert "0001 dsv4-warmup/guard  depends on: none" in stdout
    # 0002 + 0003 are one PR (trailer); 0003 imports what 0002 adds: same PR.
    assert "0002 dsv4-warmup/toy-warmup  depends on: none" in stdout
    assert "patches: 0002 + 0003" in stdout
    assert "0004 dsv4-warmup/norm  depends on: 0002" in stdout  # imports toy_keys
    assert "0005 dsv4-warmup/align  depends on: none" in stdout  # its hunk applies alone
    # Prose, comments and strings name "first", toy_keys, _toy_warmup_keys;
    # 0002's nested `def first` is local: no dependency.
    assert "0006 dsv4-warmup/first  depends on: none" in stdout
    assert "0007 dsv4-warmup/after  depends on: 0002" in stdout  # textual only
    assert "dead until" not in stderr


def test_bodies_carry_the_disclosure_and_only_what_ran(good) -> None:
    dest, _, _ = good
    bodies = {p.name.split("-")[0]: p.read_text() for p in dest.glob("*.md")}
    assert sorted(bodies) == ["0001", "0002", "0004", "0005", "0006", "0007"]
    for body in bodies.values():
        s = sections_of(body)
        assert "AI assistance was used" in s["## Purpose"]
        assert "Submitter (to fill in" in s["## Purpose"] and "<FILL IN" in s["## Purpose"]
        assert "review every changed line" in s["## Purpose"]
        assert "rerun the tests" in s["## Purpose"]
        assert "Related work" in s["## Purpose"] and "vllm-project/vllm#48805" in body
        for ref in ("#48393", "#49707", "#51802", "#52941", "#50175", "#50176"):
            assert ref in body
        for ref in ("#50177", "#50178", "#56154", "sglang#30255"):
            assert ref in body
        plan = s["## Test Plan"]
        assert "pre-commit run" not in plan  # never claimed: it did not run
        assert "python tools/pre_commit/check_forbidden_imports.py" in plan
        assert "python tools/pre_commit/check_torch_cuda.py" in plan
        assert "ruff check --no-cache --force-exclude" in plan
        assert "`mypy-3.10`: skipped (SKIP)" in plan  # not run, and said so
        assert "pytest" not in plan  # the GPU tests are for the submitter to run
        result = s["## Test Result"]
        assert "| `check-forbidden-imports` | passed |" in result
        assert "ruff 0.14.0" in result
        assert "PLEASE FILL IN" not in body
        assert "Essential Elements of an Effective PR Description Checklist" in body
    # The c128a PR: its related work first, measured figures, outputs evidence.
    p1 = sections_of(bodies["0001"])
    assert "812 ms -> 95 ms" in p1["## Test Result"]
    assert "Outputs on valid input" in p1["## Test Result"]
    assert "outputs identical on valid input" in p1["## Test Result"]
    assert "**This PR:**" in p1["## Purpose"].split("#48805")[1].split("\n")[0]
    assert "mHC warmup" not in p1["## Test Result"]
    p4 = sections_of(bodies["0004"])
    assert "| 3 | 0 |" in p4["## Test Result"]
    assert "tests/toy/test_toy_norm.py" in p4["## Purpose"]  # for the submitter to run
    assert "imports vllm.model_executor.warmup.toy_keys" in p4["## Purpose"]
    assert "do not apply without it" in sections_of(bodies["0007"])["## Purpose"]
    assert "not yet measured" in sections_of(bodies["0006"])["## Test Result"]
    # The group: one body, both commit messages, the trailer's title.
    assert "Toy: warm up the toy kernels" in bodies["0002"].splitlines()[1]
    assert "Toy: use the keys at startup" in bodies["0002"]


def test_branches_are_signed_off_by_the_person(good) -> None:
    dest, _, _ = good
    repo = dest / "vllm"
    log = git(
        repo,
        "log",
        "--format=%an <%ae>|%cn|%(trailers:only,unfold,separator=;)",
        "v0.26.0..dsv4-warmup/v0.26.0",
    ).splitlines()
    assert len(log) == 7
    for line in log:
        author, committer, trailers = line.split("|")
        assert author == JANE and committer == "Jane Doe"
        assert f"Signed-off-by: {JANE}" in trailers
        assert "Co-authored-by: Claude" in trailers
        assert "Signed-off-by: t " not in trailers and "PR:" not in trailers
    files = git(repo, "show", "--format=", "--name-only", "dsv4-warmup/toy-warmup~1").split()
    assert sorted(files) == sorted([CACHE_UTILS, "vllm/model_executor/warmup/toy_keys.py"])
    assert len(git(repo, "log", "--format=%H", "v0.26.0..dsv4-warmup/norm").split()) == 3
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "dsv4-warmup/v0.26.0"


BAD_MODULE = SPDX + textwrap.dedent('''\
    """Toy module with what vLLM's hooks refuse."""

    import re

    import torch


    def toy_sync(pattern: str) -> bool:
        torch.cuda.synchronize()
        return re.compile(pattern) is not None
    ''')


def test_checker_refuses_what_vllm_refuses(tmp_path: Path) -> None:
    patches, overlay = make_series(
        tmp_path,
        [
            {
                "subject": "[Kernel] Toy: forbidden import and torch.cuda",
                "slug": "hooks",
                "overlay": {"vllm/model_executor/warmup/toy_bad.py": BAD_MODULE},
                "append": {
                    SPARSE: "\n\ndef _toy_use() -> bool:\n"
                    "    from vllm.model_executor.warmup.toy_bad import toy_sync\n\n"
                    '    return toy_sync("x")\n\n\n_TOY_USE = _toy_use\n'
                },
            },
            {
                "subject": "[Kernel] Toy: helper",
                "slug": "helper",
                "append": {CACHE_UTILS: "\n\ndef _toy_helper() -> int:\n    return 1\n"},
            },
            {
                "subject": "[Kernel] Toy: uses the helper and the tooling",
                "slug": "user",
                "append": {
                    MTP_NORM: "\n\ndef _toy_user() -> int:\n"
                    "    from dsv4warmup import serving\n\n"
                    "    from vllm.models.deepseek_v4.common.ops.cache_utils import _toy_helper\n\n"
                    "    return _toy_helper() + len(serving.__name__)\n\n\n_TOY_USER = _toy_user\n"
                },
            },
            {
                "subject": "[Kernel] Toy: misformatted, unused import",
                "slug": "style",
                "append": {
                    SPEC_UTILS: "\n\ndef _toy(x):\n    import os\n    return [x,x+1]\n\n\n_T = _toy\n"
                },
            },
        ],
    )
    out = tmp_path / "out"
    res = run_pr(patches, overlay, out, tmp_path / "absent.md")
    assert res.returncode == 1, res.stdout + res.stderr
    err = res.stderr
    bad = "vllm/model_executor/warmup/toy_bad.py"
    assert (
        f"0001-hooks.patch: {bad}: check-forbidden-imports: {bad}:5: error: Found forbidden import: re"
        in err
    )
    assert (
        f"0001-hooks.patch: {bad}: check-torch-cuda-call: {bad}:" in err
        and "torch.accelerator" in err
    )
    assert "0002-helper.patch: " in err and "`_toy_helper`" in err
    assert "is dead until 0003-user.patch" in err
    assert "0003-user.patch: " in err and "imports dsv4warmup, this repository's tooling" in err
    assert (
        f"0004-style.patch: {SPEC_UTILS}: ruff-format: {SPEC_UTILS}: ruff format would reformat it"
        in err
    )
    assert f"0004-style.patch: {SPEC_UTILS}: ruff-check: {SPEC_UTILS}:" in err and "F401" in err
    assert "\x1b[" not in err
    assert not any(out.rglob("*.md")), "nothing is written when a check fails"
    assert not (out / "v0.26.0").exists()


def test_refuses_without_a_person_to_sign_off(tmp_path: Path) -> None:
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = dsv4-warmup\n\temail = dsv4-warmup@users.noreply.github.com\n")
    env = dict(
        os.environ,
        GIT_CONFIG_GLOBAL=str(cfg),
        GIT_CONFIG_NOSYSTEM="1",
        PYTHONPATH=str(REPO / "scripts"),
    )
    env.pop("SIGNOFF", None)
    if subprocess.run(
        ["git", "config", "--local", "user.name"], cwd=REPO, capture_output=True, env=env
    ).stdout.strip():
        pytest.skip("this checkout sets a local git identity")
    cmd = [sys.executable, "-m", "dsv4warmup", "pr", "--out", str(tmp_path / "out")]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and "pseudonym" in res.stderr and "SIGNOFF=" in res.stderr
    cfg.write_text("")
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    assert res.returncode == 1 and "no git user.name" in res.stderr
    res = subprocess.run(
        [*cmd, "--signoff", "dsv4-warmup <dsv4-warmup@users.noreply.github.com>"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 1 and "pseudonym" in res.stderr
    assert not (tmp_path / "out").exists()
    assert pr_mod.identity(JANE) == ("Jane Doe", "jane@example.com")
    with pytest.raises(pr_mod.PrError, match="Name <email>"):
        pr_mod.identity("Jane Doe")


# --------------------------------------------------------------------------
# The real newest series: what `make pr` (default BASE) exports upstream


def test_newest_series(tmp_path: Path) -> None:
    """The newest series is what upstream PRs come from (0.33.0 on): it must
    pass vLLM's hooks (mypy aside: `make pr` runs it, in minutes). Older
    series are for operators; `make pr BASE=0.26.0` reports their violations."""
    bases = pr_mod.newest_bases()
    if not bases:
        pytest.skip("no real patch series exists yet")
    base = bases[0]
    if pr_body.version(base) < (0, 33):
        pytest.skip(f"the newest series, v{base}, predates the upstream base 0.33.0")
    opts = pr_mod.Options(signoff=JANE, skip=set(NO_MYPY.split(",")))
    prs = pr_mod.export(base, tmp_path, options=opts)  # PrError names each failure
    dest = tmp_path / f"v{base}"
    assert sum(len(p.patches) for p in prs) == len(series_mod.load(base).patches)
    for pr in prs:
        body = (dest / f"{pr.number}-{pr.slug}.md").read_text()
        assert "AI assistance was used" in body and "<FILL IN" in body
        assert "- [x] AI assistance was used" in body


# --------------------------------------------------------------------------
# Pieces, in process


def _facts(files: dict[str, tuple[str | None, str]]) -> pr_code.Facts:
    changes = []
    for path, (before, after) in files.items():
        if before is None:
            added: set[int] = set()
        else:
            old = before.splitlines()
            added = {
                i + 1
                for i, line in enumerate(after.splitlines())
                if i >= len(old) or old[i] != line
            }
        changes.append(pr_code.FileChange(path, before, after, added))
    return pr_code.facts(changes)


def test_ast_dependencies() -> None:
    base_a = "import os\n\n\ndef old(x):\n    return x\n"
    # A: a nested `def first`, a new top-level function and constant, a new
    # module, and a changed signature.
    a = _facts(
        {
            "vllm/a.py": (
                base_a,
                base_a.replace("def old(x):", "def old(x, y=0):")
                + "\n\ndef helper():\n    def first():\n        return 1\n\n    return first()\n"
                + "\n\nLIMIT = 4\n",
            ),
            "vllm/newmod.py": (None, "def make():\n    return 2\n"),
        }
    )
    assert ("vllm.a", "helper") in a.defines and ("vllm.a", "LIMIT") in a.defines
    assert ("vllm.a", "first") not in a.defines  # local to helper
    assert ("vllm.a", "old") in a.changed_signatures and "vllm.newmod" in a.modules

    def b(text: str, path: str = "vllm/b.py") -> pr_code.Facts:
        return _facts({path: ("X = 1\n", "X = 1\n" + text)})

    prose = b('"""Call first, then helper, make and LIMIT: vllm.newmod."""\n# first helper\n')
    assert pr_code.needs(prose, a, set()) == []
    assert pr_code.needs(b("def first():\n    return 0\n"), a, set()) == []
    assert pr_code.needs(b("Y = 'helper first make'\n"), a, set()) == []
    assert pr_code.needs(b("from vllm.a import helper\n"), a, set()) == ["uses vllm.a.helper"]
    assert pr_code.needs(b("import vllm.newmod\n"), a, set()) == ["imports vllm.newmod"]
    assert pr_code.needs(b("from vllm import newmod\n"), a, set()) == ["imports vllm.newmod"]
    assert pr_code.needs(b("from vllm import a as m\nZ = m.LIMIT\n"), a, set()) == [
        "uses vllm.a.LIMIT"
    ]
    assert pr_code.needs(b("from .a import old\nZ = old(1, y=2)\n"), a, set()) == [
        "uses vllm.a.old"
    ]
    # The same module: a bare name is that module's.
    same = _facts({"vllm/a.py": ("Q = 0\n", "Q = 0\nR = helper()\n")})
    assert pr_code.needs(same, a, set()) == ["uses vllm.a.helper"]
    # A name of the same spelling in another module is another name.
    assert pr_code.needs(b("def helper():\n    return 3\n\n\nZ = helper()\n"), a, set()) == []


def test_new_methods_count_only_when_vllm_lacks_the_name() -> None:
    base = "class K:\n    def run(self):\n        return 1\n"
    a = _facts({"vllm/k.py": (base, base + "\n    def warm_all_keys(self):\n        return 2\n")})
    assert a.methods == {"warm_all_keys": "vllm/k.py"}
    user = _facts(
        {"vllm/u.py": ("Z = 0\n", "Z = 0\n\n\ndef f(k):\n    return k.warm_all_keys()\n")}
    )
    assert pr_code.needs(user, a, {"warm_all_keys"}) == ["calls .warm_all_keys()"]
    assert pr_code.needs(user, a, set()) == []  # a name vLLM already has elsewhere


def test_dead_code_users() -> None:
    a = _facts({"vllm/a.py": ("Z = 0\n", "Z = 0\n\n\ndef helper():\n    return helper\n")})
    ref = ("vllm.a", "helper")
    path, d = a.defines[ref]
    later = _facts({"vllm/b.py": ("Y = 0\n", "Y = 0\nfrom vllm.a import helper\n")})
    assert pr_code.users_of(ref, d, path, [a]) == []  # its own body does not count
    assert pr_code.users_of(ref, d, path, [a, later]) == [1]
    test = _facts({"tests/test_x.py": (None, "def test_a():\n    pass\n")})
    assert ("tests.test_x", "test_a") in test.exempt and "tests.test_x" in test.entry_modules


def _hook_repo(tmp: Path) -> Path:
    """A tiny repo with its own pre-commit config and hook scripts."""
    repo = tmp / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "no_todo.py").write_text(
        "import sys\nrc = 0\nfor p in sys.argv[1:]:\n"
        "    for n, line in enumerate(open(p), 1):\n"
        "        if 'TODO' in line:\n            print(f'{p}:{n}: TODO found')\n            rc = 1\n"
        "sys.exit(rc)\n"
    )
    (repo / "tools" / "add_header.py").write_text(
        "import sys\nfor p in sys.argv[1:]:\n    s = open(p).read()\n"
        "    if not s.startswith('# H'):\n        open(p, 'w').write('# H\\n' + s)\n"
    )
    (repo / ".pre-commit-config.yaml").write_text(
        textwrap.dedent("""\
        default_stages: [pre-commit, manual]
        exclude: 'third_party/.*'
        repos:
        - repo: local
          hooks:
          - id: no-todo
            name: no TODO
            entry: python tools/no_todo.py
            language: python
            types: [python]
          - id: header
            name: header
            entry: python tools/add_header.py
            language: python
            files: ^src/
            types: [python]
          - id: ci-only
            name: only in CI
            entry: python tools/no_todo.py
            language: python
            stages: [manual]
          - id: suggestion
            name: Suggestion
            entry: bash -c 'echo "hi"'
            language: system
            pass_filenames: false
        - repo: https://github.com/example/unfetchable
          rev: v1.0
          hooks:
          - id: remote
        """)
    )
    (repo / "src").mkdir()
    (repo / "src" / "old.py").write_text("# H\nx = 1  # TODO pristine\n")
    (repo / "src" / "clean.py").write_text("# H\ny = 2\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "v0")
    return repo


def test_hooks_blame_only_what_is_new(tmp_path: Path) -> None:
    repo = _hook_repo(tmp_path)
    # The patch: old.py keeps its pristine TODO (on another line now), clean.py
    # gets a new one, new.py lacks the header, third_party is excluded.
    (repo / "src" / "old.py").write_text("# H\nz = 0\nx = 1  # TODO pristine\n")
    (repo / "src" / "clean.py").write_text("# H\ny = 2  # TODO new\n")
    (repo / "src" / "new.py").write_text("w = 3\n")
    (repo / "third_party").mkdir()
    (repo / "third_party" / "t.py").write_text("# TODO vendored\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "patch")
    files = ["src/clean.py", "src/new.py", "src/old.py", "third_party/t.py"]
    config = pr_hooks.load_config(repo)

    def on_pristine(fs, run):
        present = [f for f in fs if (tmp_path / "repo").joinpath(f).exists() and f != "src/new.py"]
        git(repo, "checkout", "-q", "v0")
        try:
            return run(present)
        finally:
            pr_hooks.restore(repo)
            git(repo, "checkout", "-q", "-")

    results = {r.hook.id: r for r in pr_hooks.check(repo, config, files, on_pristine, set())}
    todo = results["no-todo"]
    assert todo.files == ["src/clean.py", "src/new.py", "src/old.py"]  # exclude applied
    assert todo.status == "failed"
    assert todo.new_lines == ["src/clean.py:2: TODO found"]  # old.py's TODO is pristine
    header = results["header"]
    assert header.status == "failed" and header.new_lines == ["modified src/new.py"]
    assert not git(repo, "status", "--porcelain").strip(), "hook edits are undone"
    assert "ci-only" not in results  # stage manual only
    assert results["suggestion"].status == "not run"
    assert results["remote"].status == "not run" and "cannot be fetched" in results["remote"].detail
    assert todo.command == "python tools/no_todo.py src/clean.py src/new.py src/old.py"
    # A failure the pristine files have as well is not blamed.
    only_old = pr_hooks.check(repo, config, ["src/old.py"], on_pristine, {"header"})
    assert {r.hook.id: r.status for r in only_old}["no-todo"] == "pre-existing"
    assert {r.hook.id: r.status for r in only_old}["header"] == "not run"


def test_blame_ignores_what_the_pristine_file_already_had(tmp_path: Path) -> None:
    """Under a ruff that flags the pristine file, only the patch's own lines count."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[tool.ruff.lint]\nselect = ["F"]\n')
    (repo / "m.py").write_text("import os\n\n\ndef f():\n    return [1,2]\n")  # F401 + unformatted
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    ruff = str(Path(sys.executable).parent / "ruff")

    def commit(text: str) -> series_mod.Patch:
        with open(repo / "m.py", "a") as f:
            f.write(text)
        git(repo, "commit", "-q", "-a", "-s", "-m", "change")
        mail = tmp_path / f"{len(list(tmp_path.glob('*.patch')))}.patch"
        mail.write_text(git(repo, "format-patch", "-1", "--stdout", "HEAD"))
        return series_mod.Patch(mail)

    clean = commit("\n\ndef g() -> int:\n    return 1\n")
    assert pr_mod.style_problems(ruff, repo, clean) == []
    unused = commit("\n\ndef h() -> None:\n    import sys\n")
    assert any("F401" in p for p in pr_mod.style_problems(ruff, repo, unused))
    messy = commit("\n\ndef k():\n    return {1:2}\n")
    problems = pr_mod.style_problems(ruff, repo, messy)
    assert problems == [f"{messy.name}: m.py: ruff format would reformat it"]


def test_signed_mail_replaces_the_project_identity(tmp_path: Path) -> None:
    mail = tmp_path / "0001-x.patch"
    mail.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: dsv4-warmup <dsv4-warmup@users.noreply.github.com>\n"
        "Date: Mon, 1 Dec 2026 00:00:00 +0000\n"
        "Subject: [PATCH] [Kernel] Do it\n\n"
        "Why.\n\nPR: grouped\nSigned-off-by: dsv4-warmup <dsv4-warmup@users.noreply.github.com>\n"
        "---\n a | 1 +\n\ndiff --git a/a b/a\n"
    )
    out = pr_mod.signed_mail(series_mod.Patch(mail), ("Jörg Doe", "j@example.com"), "AI <ai@x>")
    assert "dsv4-warmup" not in out.split("\n---\n")[0]
    assert "From: =?utf-8?" in out  # RFC 2047 for a non-ASCII name
    assert (
        out.split("\n---\n")[0]
        .rstrip("\n")
        .endswith("Why.\n\nCo-authored-by: AI <ai@x>\nSigned-off-by: Jörg Doe <j@example.com>")
    )
    assert pr_mod.pr_slug(series_mod.Patch(mail)) == ("grouped", None)


def test_body_in_the_0_33_template() -> None:
    """0.33.0's template: Overview / Claims / Validation / Details, and its
    checklist's AI box ticked."""
    template = sources.read_members("0.33.0", [".github/PULL_REQUEST_TEMPLATE.md"])[
        ".github/PULL_REQUEST_TEMPLATE.md"
    ]
    assert template is not None
    b = pr_body.BodyInput(
        base="0.33.0",
        title="[Bugfix] Initialise C128A buffers",
        branch="dsv4-warmup/c128a",
        slug="c128a",
        numbers=["0001"],
        messages=[("[Bugfix] Initialise C128A buffers", "Why it matters.")],
        files=[SPARSE],
        diff="_build_c128a_topk_metadata_kernel",
        identifiers={"BuildC128ATopkMetadataKernel", "_is_safe_c128a"},
        depends=[],
        checks=[
            pr_body.CheckLine("check-forbidden-imports", f"python x.py {SPARSE}", "passed"),
            pr_body.CheckLine("mypy", "python tools/pre_commit/mypy.py 3.11", "not run", "why"),
        ],
        not_applicable=["clang-format"],
        submitter=JANE,
        coauthor=pr_mod.COAUTHOR,
        touches_outputs=["_build_c128a_topk_metadata_kernel"],
    )
    body = pr_body.render(b, template.decode(), Path("/nonexistent.md"))
    s = sections_of(body, ("## Overview", "## Claims", "## Validation", "## Details"))
    assert "AI assistance was used" in s["## Overview"]
    assert "- [x] AI assistance was used during the creation of this PR." in body
    assert "- [ ] I used vLLM's `/pr-checklist` skill" in body
    assert "### Test Plan" in s["## Validation"] and "### Test Result" in s["## Validation"]
    assert "`mypy`: why" in s["## Validation"] and "Not yet shown" in s["## Validation"]
    assert "`/pr-checklist` skill and addressed" in s["## Details"]
    assert "sgl-project/sglang#30255" in s["## Details"].split("<details>")[0]
    assert "Model evaluation" in s["## Details"]


def test_topics_of_0_33_class_names() -> None:
    """0.33.0's kernels are classes; a PR touching them still finds its figures."""
    assert "sparse-mla" in pr_body.topics_of({"CombineTopkSwaIndicesKernel"}, [])
    assert "spec-decode" in pr_body.topics_of({"MTPSharedHeadRMSNormKernel"}, [])
    assert "spec-decode" in pr_body.topics_of({"_load_drafter_with_registry"}, [])
    assert pr_body.topics_of({"load_model"}, ["vllm/v1/worker/gpu_model_runner.py"]) == set()


def _related_work_claimed_on_0_33(topics: set[str]) -> str:
    """A 0.33.0 PR's related-work block up to the list it does not claim."""
    b = pr_body.BodyInput(
        **{
            **{f: None for f in pr_body.BodyInput.__dataclass_fields__},
            "base": "0.33.0",
        }
    )
    return pr_body.related_block(b, topics).split("<details>")[0]


def test_compile_pool_pr_cites_the_parallel_warmup_not_the_registry_migration() -> None:
    topics = pr_body.topics_of(
        {"compile_tilelang_warmup", "VLLM_TILELANG_JIT_WARMUP_NUM_THREADS"},
        ["vllm/model_executor/warmup/jit_warmup_tilelang_helper.py"],
    )
    assert topics == {"compile-pool"}
    mine = _related_work_claimed_on_0_33(topics)
    assert "vllm-project/vllm#56683" in mine and "**This PR:**" in mine
    assert "#50175" not in mine  # the registry migration is listed, not claimed


def test_compile_sharing_pr_cites_sglang_sharding_not_the_registry_migration() -> None:
    topics = pr_body.topics_of(
        {"share_compiles", "WarmupShares"},
        ["vllm/model_executor/warmup/jit_warmup_sharing.py"],
    )
    assert topics == {"compile-sharing"}
    mine = _related_work_claimed_on_0_33(topics)
    assert "sgl-project/sglang#28271" in mine and "**This PR:**" in mine
    assert "#50175" not in mine


def test_figures_say_which_base_they_were_measured_on(tmp_path: Path) -> None:
    """A section whose heading names the PR's release counts as measured on
    this branch; the intro's release (the old series) stays flagged."""
    results = tmp_path / "gpu-results.md"
    results.write_text(
        "# GPU results\n\nMeasured with a patched vLLM 0.26.0 tree.\n\n"
        "## Old series\n\n| check | status |\n|---|---|\n"
        "| c128a memcheck | old: 0 errors, outputs identical |\n\n"
        "## vLLM 0.33.0 on the lab\n\n| run | result |\n|---|---|\n"
        "| c128a memcheck on 0.33.0 | new: 0 errors, outputs match references |\n"
        "| c128a sweep on 0.33.0 | new sweep: outputs equal the torch references |\n"
    )
    m = pr_body.measured(results, "0.33.0", ["x"], ["0001"], "c128a", "", {"c128a"})
    assert m is not None
    assert any("new: 0 errors" in r for r in m.own_rows)
    assert not any("new: 0 errors" in r for r in m.rows)
    assert any("old: 0 errors" in r for r in m.rows)
    assert any("new:" in r for r in m.own_outputs) and any("old:" in r for r in m.outputs)
    assert any("new sweep:" in r for r in m.own_outputs)
    old = pr_body.measured(results, "0.26.0", ["x"], ["0001"], "c128a", "", {"c128a"})
    assert old is not None and not old.own_rows  # 0.33.0 figures are not 0.26.0's


def test_a_status_row_naming_its_release_is_that_releases(tmp_path: Path) -> None:
    """In a table of the old series' section, a row whose first cell names a
    release ("0.33.0 steady state") was measured on that release."""
    results = tmp_path / "gpu-results.md"
    results.write_text(
        "# GPU results\n\nMeasured with a patched vLLM 0.26.0 tree.\n\n"
        "## Status\n\n| check | status |\n|---|---|\n"
        "| c128a guard overhead | old: -3 %, outputs identical |\n"
        "| 0.33.0 steady state: the c128a guard | new: +2.1 %, outputs identical |\n"
    )
    m = pr_body.measured(results, "0.33.0", ["x"], ["0001"], "c128a", "", {"c128a"})
    assert m is not None
    assert [r for r in m.own_rows if "new:" in r] and not [r for r in m.rows if "new:" in r]
    assert [r for r in m.rows if "old:" in r] and not [r for r in m.own_rows if "old:" in r]
    assert any("new:" in r for r in m.own_outputs) and not any("new:" in r for r in m.outputs)
    old = pr_body.measured(results, "0.26.0", ["x"], ["0001"], "c128a", "", {"c128a"})
    assert old is not None and not old.own_outputs
    assert not any("new:" in r for r in old.outputs + old.rows)  # another release's


def test_sections_say_which_base_they_were_measured_on(tmp_path: Path) -> None:
    """A section picked by its heading is this branch's when the heading
    names the PR's release, the old series' otherwise."""
    results = tmp_path / "gpu-results.md"
    results.write_text(
        "# GPU results\n\nMeasured with a patched vLLM 0.26.0 tree.\n\n"
        "## TileLang pool, old series\n\nold pool: 151 s\n\n"
        "## vLLM 0.33.0, TileLang pool\n\nnew pool: 40 s\n"
    )
    m = pr_body.measured(results, "0.33.0", ["x"], ["0011"], "pool", "", {"compile-pool"})
    assert m is not None
    assert [t for t, _ in m.own_sections] == ["vLLM 0.33.0, TileLang pool"]
    assert [t for t, _ in m.sections] == ["TileLang pool, old series"]
    old = pr_body.measured(results, "0.26.0", ["x"], ["0011"], "pool", "", {"compile-pool"})
    assert old is not None and not old.own_sections and len(old.sections) == 2


def test_a_section_naming_its_base_and_the_patch_number_is_the_prs(tmp_path: Path) -> None:
    """Patch numbers are per base: a heading that names the PR's release and
    its number is this branch's evidence, though the intro names another
    release; the same number under another release names another patch."""
    results = tmp_path / "gpu-results.md"
    results.write_text(
        "# GPU results\n\nMeasured with a patched vLLM 0.26.0 tree.\n\n"
        "## Old series: patch 0012 sentinel\n\nold: 3 s\n\n"
        "## vLLM 0.33.0, session 17: patch 0012 on the GPU\n\nwarm 1.57 s\n\n"
        "## vLLM 0.33.0, session 18: patch 0013\n\nother\n"
    )
    m = pr_body.measured(results, "0.33.0", ["x"], ["0012"], "zzz", "", set())
    assert m is not None
    assert [t for t, _ in m.own_sections] == ["vLLM 0.33.0, session 17: patch 0012 on the GPU"]
    assert m.sections == []  # 0.26.0's 0012 is another patch
    old = pr_body.measured(results, "0.26.0", ["x"], ["0012"], "zzz", "", set())
    assert old is not None and [t for t, _ in old.sections] == ["Old series: patch 0012 sentinel"]


def test_figures_do_not_link_this_projects_issues_to_vllms() -> None:
    """ "#15" in the results is this project's issue: in an upstream body it would
    link to vllm-project/vllm#15. Upstream references and headings stay."""
    text = (
        "| mHC | passed: both claims of #15 hold; cost is #18's (see #4, #1234) |\n"
        "#### heading, vllm-project/vllm#48805, sgl-project/sglang#30255, &#35;"
    )
    out = pr_body.without_project_refs(text)
    for n in ("15", "18", "4", "1234"):
        assert f"dsv4-warmup issue {n}" in out
    assert not re.search(r"(?<![\w/#&])#\d", out), out
    assert "#### heading" in out and "vllm-project/vllm#48805" in out
    assert "sgl-project/sglang#30255" in out and "&#35;" in out
    body = pr_body.BodyInput(
        "0.33.0", "t", "b", "s", ["0005"], [], [], "", set(), [], [], [], "J <j@x>", ""
    )
    rows = ["| run | result |", "|---|---|", "| mHC | both claims of #15 hold |"]
    block = pr_body.result_block(body, pr_body.Measured("r.md", "0.33.0", [], [], [], rows))
    assert "both claims of dsv4-warmup issue 15 hold" in block


def test_fill_template_without_the_sections() -> None:
    filled = pr_body.fill_template(
        "intro\n\n---\nfooter\n", {"Purpose": "P", "Test Plan": "T", "Test Result": "R"}
    )
    assert (
        filled.index("intro")
        < filled.index("## Purpose\n\nP")
        < filled.index("## Test Result\n\nR")
    )
    assert filled.index("## Test Result") < filled.index("---") < filled.index("footer")
