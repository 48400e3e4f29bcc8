"""`make pr`: per PR a `git am` branch and a body, after vLLM's own checks.

Synthetic series (tmp dirs, passed through DSV4_PATCHES_DIR / DSV4_OVERLAY_DIR
/ DSV4_EVIDENCE_DIR to a subprocess) against the real 0.26.0 sdist check the
dependency statement (by AST, never by prose), grouping, the human sign-off,
that the checker refuses what vLLM's hooks refuse, and the bodies: each
quotes its own patch's evidence file and nothing else, with valid Markdown.
The evidence parser, the body blocks, the hook runner's blame logic and the
AST analysis are tested in process on tiny inputs. The real newest series is
checked once, as a dry run (its GPU patches' evidence comes from a GPU host)
and without mypy, which needs minutes: `make pr` runs it.
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
from dsv4warmup.generation import release_tuple
from helpers import git

REPO = Path(__file__).resolve().parents[2]
JANE = "Jane Doe <jane@example.com>"
SPARSE = "vllm/models/deepseek_v4/sparse_mla.py"
CACHE_UTILS = "vllm/models/deepseek_v4/common/ops/cache_utils.py"
MTP_NORM = "vllm/models/deepseek_v4/common/ops/fused_mtp_input_rmsnorm.py"
SPEC_UTILS = "vllm/v1/spec_decode/utils.py"
KERNEL_WARMUP = "vllm/model_executor/warmup/kernel_warmup.py"
OLD_SECTIONS = ("## Purpose", "## Test Plan", "## Test Result")
NEW_SECTIONS = ("## Overview", "## Claims", "## Validation", "## Details")
NO_MYPY = "mypy-3.10,mypy-3.11,mypy-3.12,mypy-3.13,mypy"
TEMPLATE_0_34 = ".github/PULL_REQUEST_TEMPLATE.md"


def sections_of(body: str, heads: tuple[str, ...] = OLD_SECTIONS) -> dict[str, str]:
    out: dict[str, str] = {}
    for head in heads:
        assert head in body, head
        text = body.split(head, 1)[1]
        out[head] = re.split(r"^(?:## |---$)", text, maxsplit=1, flags=re.MULTILINE)[0].strip()
    return out


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)*")


def numbers(text: str) -> set[str]:
    """Number tokens of ``text`` ("v0.34.0" reads as 0.34.0; "sm90", "cli2" are names)."""
    return set(_NUMBER.findall(re.sub(r"\bv(?=\d)", " ", text)))


def foreign_numbers(body: str, *sources: str) -> set[str]:
    """Numbers of ``body`` that none of ``sources`` has (the "Stacked on"
    lines name other PRs by number and title, which are not figures)."""
    own = "\n".join(ln for ln in body.splitlines() if not ln.startswith("Stacked on "))
    allowed: set[str] = set()
    for text in sources:
        allowed |= numbers(text)
    return numbers(own) - allowed


def assert_fit_to_open(body: str) -> None:
    """What every generated body must be: closed fences, balanced
    <details>, no lab word."""
    fences = [ln for ln in body.splitlines() if re.match(r"^ {0,3}(```|~~~)", ln)]
    assert len(fences) % 2 == 0, "a code fence is left open"
    assert pr_body.fence_problems(body) == []
    assert body.count("<details>") == body.count("</details>")
    assert not re.search(r"session", body, re.I)
    assert pr_body.lint(body) == []


def evidence_text(subject: str, k: int, measurement: bool = False) -> str:
    """An evidence file whose figures are this patch's own: k's digits."""
    ms = f"{k}{k}.{k}7"
    out = f"""\
        # {k:04d} evidence

        Patch: {subject}

        ## Before

        - Command: `pytest -v -s tests/toy/test_toy_{k}.py`
        - Tree: pristine vLLM 0.26.0 sdist with the new test
        - Host: Toy host {k}0{k}, no GPU
        - Versions: Python 3.11.{k}
        - Date: 2026-12-0{k}

        ```text
        E       AssertionError: assert {k}00{k} == {k}
        {k} failed, {k}{k} passed in 0.0{k}s
        ```

        ## After

        - Command: `pytest -v -s tests/toy/test_toy_{k}.py`
        - Tree: patched vLLM 0.26.0 sdist
        - Host: Toy host {k}0{k}, no GPU
        - Versions: Python 3.11.{k}
        - Date: 2026-12-0{k}

        ```text
        {k}{k}{k} passed in 0.0{k}s
        ```
        """
    if measurement:
        out += f"""
        ## Measurement: toy kernel {ms} us -> {k}.{k}5 us

        - Command: `python benchmarks/kernels/toy_{k}.py`
        - Tree: patched vLLM 0.26.0 sdist
        - Host: Toy GPU {k}{k}0
        - Versions: torch 2.{k}
        - Date: 2026-12-1{k}

        Median of {k}1 runs.

        ```text
        before {ms} us, after {k}.{k}5 us
        ```

        ## Related

        - vllm-project/vllm#4{k}{k}{k}: warms the same toy kernel exhaustively; this one
          warms only the keys the runtime launches.
        """
    return textwrap.dedent(out)


# --------------------------------------------------------------------------
# Synthetic series against the real 0.26.0 sdist


def make_series(
    tmp: Path, patches: list[dict], base: str = "0.26.0", evidence: bool = True
) -> tuple[Path, Path]:
    """patches: dicts with subject, trailers, append {path: text}, replace
    {path: (old, new)}, overlay {path: text}, plan (a test plan paragraph).
    With ``evidence``, each patch gets an evidence file under tmp/evidence."""
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
        if spec.get("plan"):
            msg += "\n\n" + spec["plan"]
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
        if evidence:
            ev = tmp / "evidence" / f"v{base}" / f"{number:04d}.md"
            ev.parent.mkdir(parents=True, exist_ok=True)
            ev.write_text(evidence_text(spec["subject"], number, measurement=number % 2 == 1))
    (series_dir / "series").write_text("\n".join(lines) + "\n")
    return tmp / "patches", overlay


def run_pr(
    patches: Path,
    overlay: Path,
    out: Path,
    signoff: str | None = JANE,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        DSV4_PATCHES_DIR=str(patches),
        DSV4_OVERLAY_DIR=str(overlay),
        DSV4_EVIDENCE_DIR=str(patches.parent / "evidence"),
        PYTHONPATH=str(REPO / "scripts"),
        SKIP=NO_MYPY,
        **(env_extra or {}),
    )
    for var in ("SIGNOFF", "DRY_RUN"):
        if var not in (env_extra or {}):
            env.pop(var, None)
    args = ["--base", "0.26.0", "--out", str(out)]
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
GOOD = [
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
        "plan": "Test plan:\n  pytest -v -s tests/toy/test_toy_1.py\nOut-of-range ids read nothing.",
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
]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("good")
    patches, overlay = make_series(tmp, GOOD)
    out = tmp / "out"
    res = run_pr(patches, overlay, out)
    assert res.returncode == 0, res.stderr
    return out / "v0.26.0", res.stdout, res.stderr, tmp


def test_dependencies_come_from_code_not_prose(good) -> None:
    _, stdout, stderr, _ = good
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


def test_bodies_quote_their_own_evidence_and_nothing_else(good) -> None:
    dest, stdout, _, tmp = good
    bodies = {p.name.split("-")[0]: p.read_text() for p in dest.glob("*.md")}
    assert sorted(bodies) == ["0001", "0002", "0004", "0005", "0006", "0007"]
    own = {"0001": [1], "0002": [2, 3], "0004": [4], "0005": [5], "0006": [6], "0007": [7]}
    config = sources.read_members("0.26.0", [".pre-commit-config.yaml"])[".pre-commit-config.yaml"]
    template = sources.read_members("0.26.0", [".github/PULL_REQUEST_TEMPLATE.md"])
    for number, body in bodies.items():
        assert_fit_to_open(body)
        assert pr_body.word_count(body) <= pr_body.WORD_BUDGET, number
        assert f"({pr_body.word_count(body)} words of prose)" in stdout
        s = sections_of(body)
        assert "AI assistance was used" in s["## Purpose"]
        assert f"`Co-authored-by: {pr_mod.COAUTHOR}`" in s["## Purpose"]
        assert "reviewed every changed line" in s["## Purpose"]
        assert "checked for duplicate work" in s["## Purpose"]
        assert "ran the commands under Validation" in s["## Purpose"]
        assert "PLEASE FILL IN" not in body
        assert "Essential Elements of an Effective PR Description Checklist" in body
        # The hooks that ran, in one line; mypy was skipped, and says so.
        result = s["## Test Result"]
        assert "run on this branch (ruff at its pin, 0.14.0), passed, except not run: " in result
        assert "`mypy-3.10`: skipped (SKIP)" in result
        assert "<summary>Passed</summary>" in result and "`check-forbidden-imports`" in result
        assert "suggestion" not in s["## Test Result"]  # a hook that only prints
        evidence = [(tmp / "evidence" / "v0.26.0" / f"{k:04d}.md").read_text() for k in own[number]]
        mails = [p.read_text() for p in (tmp / "patches" / "v0.26.0").glob(f"{number}-*.patch")]
        for k in own[number]:
            # The test's command, both outputs verbatim, where they ran.
            assert f"pytest -v -s tests/toy/test_toy_{k}.py" in s["## Test Plan"]
            assert f"E       AssertionError: assert {k}00{k} == {k}" in s["## Test Plan"]
            assert f"{k}{k}{k} passed in 0.0{k}s" in s["## Test Plan"]
            assert f"Toy host {k}0{k}, no GPU; Python 3.11.{k}; 2026-12-0{k}" in s["## Test Plan"]
            assert f"`{k} failed, {k}{k} passed in 0.0{k}s`" in s["## Purpose"]  # a claim
            if k % 2:
                assert f"Toy kernel {k}{k}.{k}7 us -> {k}.{k}5 us" in s["## Purpose"]
                assert f"Toy GPU {k}{k}0; torch 2.{k}; 2026-12-1{k}" in s["## Test Plan"]
                assert (
                    f"vllm-project/vllm#4{k}{k}{k}: warms the same toy kernel exhaustively; this one warms"
                    in s["## Purpose"]
                )
        others = [k for n, ks in own.items() if n != number for k in ks]
        for k in others:  # no figure of another patch's evidence
            assert f"{k}{k}{k} passed" not in body and f"Toy host {k}0{k}" not in body
        # Every number in the body comes from its own evidence, its own
        # commit messages, the tree's template / hook config or the base.
        stray = foreign_numbers(
            body, *evidence, *mails, config.decode(), str(template), "v0.26.0 " + number
        )
        assert not stray, (number, stray)
    # The group: one body, both commit messages, the trailer's title.
    assert "Toy: warm up the toy kernels" in bodies["0002"].splitlines()[1]
    assert "**[Kernel] Toy: use the keys at startup**" in bodies["0002"]
    assert "Stacked on 0002" in bodies["0004"] and "imports vllm.model_executor" in bodies["0004"]
    assert "do not apply without it" in bodies["0007"]
    # 0001's test plan from its commit message describes the test.
    assert "Out-of-range ids read nothing." in sections_of(bodies["0001"])["## Test Plan"]
    # A kernel changes: the submitter owes a model evaluation.
    assert "Model evaluation" not in bodies["0006"]


def test_branches_are_signed_off_by_the_person(good) -> None:
    dest, _, _, _ = good
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
    res = run_pr(patches, overlay, out)
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
    # A dry run writes them for inspection, and still fails with the same lines.
    dry = run_pr(patches, overlay, out, env_extra={"DRY_RUN": "1"})
    assert dry.returncode == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("  ")]
    assert lines and all(ln in dry.stderr for ln in lines)
    assert "dry run: written, but checks failed" in dry.stderr
    body = (out / "v0.26.0" / "0001-hooks.md").read_text()
    assert_fit_to_open(body)
    assert "passed, except **failed**: `check-forbidden-imports`, `check-torch-cuda-call`" in body


def test_a_patch_without_evidence_is_refused_unless_dry_run(tmp_path: Path) -> None:
    patches, overlay = make_series(
        tmp_path,
        [GOOD[4]],
        evidence=False,
    )
    out = tmp_path / "out"
    res = run_pr(patches, overlay, out)
    assert res.returncode == 1
    assert "0001-align.patch: no evidence file" in res.stderr
    assert str(tmp_path / "evidence" / "v0.26.0" / "0001.md") in res.stderr
    assert "DRY_RUN=1" in res.stderr
    assert not out.exists(), "nothing is written"
    # A wrong file is refused in a dry run too: it is for another patch.
    ev = tmp_path / "evidence" / "v0.26.0" / "0001.md"
    ev.parent.mkdir(parents=True)
    ev.write_text(evidence_text("[Kernel] Toy: something else", 1))
    res = run_pr(patches, overlay, out, env_extra={"DRY_RUN": "1"})
    assert res.returncode == 1 and "is for '[Kernel] Toy: something else'" in res.stderr
    ev.unlink()
    res = run_pr(patches, overlay, out, env_extra={"DRY_RUN": "1"})
    assert res.returncode == 0, res.stderr
    assert "DRY RUN: no evidence file" in res.stdout
    body = (out / "v0.26.0" / "0001-align.md").read_text()
    assert_fit_to_open(body)
    assert "**Dry run: no evidence file**" in body and "0001.md" in body
    assert "No evidence yet (dry run)" in body


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


@pytest.fixture(scope="module")
def newest(tmp_path_factory: pytest.TempPathFactory):
    """A dry run of the newest series (its GPU patches' evidence comes from a
    GPU host), mypy aside (`make pr` runs it, in minutes): (base, bodies'
    folder, PRs, the failures it reports, options)."""
    bases = pr_mod.newest_bases()
    if not bases:
        pytest.skip("no real patch series exists yet")
    base = bases[0]
    if release_tuple(base) < (0, 34):
        pytest.skip(f"the newest series, v{base}, predates the upstream base 0.34.0")
    tmp = tmp_path_factory.mktemp("newest")
    opts = pr_mod.Options(signoff=JANE, skip=set(NO_MYPY.split(",")), dry_run=True)
    try:
        prs, failures = pr_mod.export(base, tmp, options=opts), ""
    except pr_mod.DryRunFailures as e:
        prs, failures = e.prs, str(e)
    return base, tmp / f"v{base}", prs, failures, opts


def test_newest_series_bodies(newest) -> None:
    """Every body of the newest series is fit to open and quotes only its own
    patch's evidence (or says, in a dry run, that it has none yet)."""
    base, dest, prs, _, opts = newest
    series = series_mod.load(base)
    assert sum(len(p.patches) for p in prs) == len(series.patches)
    members = sources.read_members(base, [TEMPLATE_0_34, ".pre-commit-config.yaml"])
    context = " ".join(m.decode() for m in members.values() if m) + f" v{base}"
    for pr in prs:
        body = (dest / f"{pr.number}-{pr.slug}.md").read_text()
        assert_fit_to_open(body)
        s = sections_of(body, NEW_SECTIONS)
        assert "AI assistance was used" in s["## Details"]
        assert "- [x] AI assistance was used" in body
        assert "- [ ] I used vLLM's `/pr-checklist` skill" in body  # the human's to tick
        own: list[str] = [context]
        for patch in pr.patches:
            own += [patch.text, patch.name]
            path = pr_mod.evidence_path(opts.evidence, base, patch)
            if path.is_file():
                evidence = pr_body.read_evidence(path, patch.subject, pr_mod.has_test(patch))
                own.append(path.read_text())
                runs = (evidence.before, evidence.after, *evidence.measurements)
                for run in filter(None, runs):
                    assert run.output in s["## Validation"]
            else:
                assert "**Dry run: no evidence file**" in s["## Validation"]
        assert not foreign_numbers(body, *own), pr.number


def test_newest_series_passes_vllms_hooks(newest) -> None:
    """Upstream PRs come from the newest series: it must pass the tree's
    pre-commit hooks, the pinned ruff and the dependency checks. A failure
    here is the series' to fix; the message names patch, file, hook, line."""
    _, _, _, failures, _ = newest
    assert not failures, failures


# --------------------------------------------------------------------------
# Evidence files, body blocks, in process

EVIDENCE = textwrap.dedent("""\
    # 0003 evidence

    Patch: [Bugfix] Toy: initialise the buffers

    ## Before

    - Command: `pytest -v -s tests/kernels/test_toy.py -k buffers`
    - Tree: pristine vLLM 0.34.0 sdist + this change's test
    - Host: NVIDIA H200, Ubuntu 24.04
    - Versions: torch 2.14.0, triton 3.8.0
    - Date: 2026-12-07

    ```text
    E   assert -17 == -1
    1 failed in 4.20s
    ```

    ## After

    Command: pytest -v -s tests/kernels/test_toy.py -k buffers
    Tree: patched vLLM 0.34.0 sdist
    Host: NVIDIA H200, Ubuntu 24.04
    Versions: torch 2.14.0, triton 3.8.0
    Date: 2026-12-07

    ```text
    1 passed in 4.10s
    ```

    ## Measurement: build time unchanged (5.1 us both)

    - Command: `python benchmarks/kernels/toy.py`
    - Tree: patched vLLM 0.34.0 sdist
    - Host: NVIDIA H200, Ubuntu 24.04
    - Versions: torch 2.14.0, triton 3.8.0
    - Date: 2026-12-08

    Median of 50
    launches.

    ~~~text
    base 5.1 us, change 5.1 us
    ~~~
    """)


def _evidence(tmp_path: Path, text: str, subject: str = "[Bugfix] Toy: initialise the buffers"):
    path = tmp_path / "0003.md"
    path.write_text(text)
    return pr_body.read_evidence(path, subject)


def test_evidence_file_is_read_as_written(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, EVIDENCE)
    assert ev.before.command == "pytest -v -s tests/kernels/test_toy.py -k buffers"
    assert ev.before.output == "E   assert -17 == -1\n1 failed in 4.20s"
    assert ev.after.tree == "patched vLLM 0.34.0 sdist" and ev.after.date == "2026-12-07"
    colon = EVIDENCE.replace("Tree: patched vLLM", "Tree: Patched: vLLM")
    assert _evidence(tmp_path, colon).after.tree == "Patched: vLLM 0.34.0 sdist"
    (m,) = ev.measurements
    assert m.title == "build time unchanged (5.1 us both)"
    assert m.note == "Median of 50\nlaunches." and m.output == "base 5.1 us, change 5.1 us"
    assert ev.related == ""


def test_a_change_without_a_test_may_show_measurements_alone(tmp_path: Path) -> None:
    # A dependency pin has no test to fail before and pass after.
    start, end = EVIDENCE.index("## Before"), EVIDENCE.index("## Measurement")
    measured_only = EVIDENCE[:start] + EVIDENCE[end:]
    path = tmp_path / "0003.md"
    path.write_text(measured_only)
    subject = "[Bugfix] Toy: initialise the buffers"
    ev = pr_body.read_evidence(path, subject, has_test=False)
    assert ev.before is None and ev.after is None
    assert [m.title for m in ev.measurements] == ["build time unchanged (5.1 us both)"]
    # A change with a test still needs both runs, and a change without one
    # needs a measurement or both runs.
    with pytest.raises(pr_body.EvidenceError, match="no `## Before`"):
        pr_body.read_evidence(path, subject)
    path.write_text(EVIDENCE[:start])
    with pytest.raises(pr_body.EvidenceError, match="no `## Measurement"):
        pr_body.read_evidence(path, subject, has_test=False)
    path.write_text(EVIDENCE.replace("## After", "## Measurement: after"))
    with pytest.raises(pr_body.EvidenceError, match="no `## After`"):
        pr_body.read_evidence(path, subject, has_test=False)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("Patch: [Bugfix] Toy: initialise the buffers", "Patch: [Bugfix] Other"), "is for"),
        (("- Host: NVIDIA H200, Ubuntu 24.04\n", "", 1), "Before lacks `Host:`"),
        (("1 passed in 4.10s\n```", "1 passed in 4.10s"), "never closed"),
        (("Tree: patched vLLM 0.34.0 sdist\n", "Tree: pristine\n"), "After runs on the patched"),
        (("Tree: patched vLLM 0.34.0 sdist\n", "Tree: both\n"), "starts with `pristine`"),
        (("Tree: patched vLLM 0.34.0 sdist\n", "Tree: patchedx\n"), "starts with `pristine`"),
        (("Date: 2026-12-07\n", "Date: yesterday\n", 1), "YYYY-MM-DD"),
        (("## After", "## Afterwards"), "unknown section `## Afterwards`"),
        (("# 0003 evidence", "# 0003 evidence\n\nSome words."), "only a `# title`"),
        (
            ("    ```text\n    1 passed", "    ```text\n    x\n    ```\n    ```text\n    1 passed"),
            "",
        ),
        (("1 failed in 4.20s", "\n".join(["line"] * 31)), "quote at most 30"),
    ],
)
def test_evidence_file_errors_name_the_file(tmp_path: Path, edit: tuple, message: str) -> None:
    old, new, *count = edit
    text = EVIDENCE.replace(textwrap.dedent(old), textwrap.dedent(new), *count)
    assert text != EVIDENCE
    with pytest.raises(pr_body.EvidenceError) as e:
        _evidence(tmp_path, text)
    assert str(tmp_path / "0003.md") in str(e.value)
    assert message in str(e.value) or (not message and "exactly one fenced" in str(e.value))


def _body_input(**kw: object) -> pr_body.BodyInput:
    args: dict = dict(
        base="0.34.0",
        title="[Bugfix] Toy: initialise the buffers",
        branch="dsv4-warmup/initialise",
        parts=[],
        depends=[],
        checks=[
            pr_body.CheckLine("check-spdx-header", "python x.py", "passed"),
            pr_body.CheckLine("ruff-check", "ruff check", "passed", "ruff 0.17.2 (pinned)"),
            pr_body.CheckLine("markdownlint-cli2", "", "not run", "cannot be fetched here"),
        ],
        submitter=JANE,
        coauthor=pr_mod.COAUTHOR,
    )
    args.update(kw)
    return pr_body.BodyInput(**args)


MESSAGE = """\
DeepseekV4SparseMLAMetadataBuilder allocates its buffers with
torch.empty, so bytes the kernel does not write reach the attention
kernels as slot ids.

- Slot ids start as -1 ("no slot") and
  lengths as 0.

Test plan:
  pytest -v -s tests/kernels/test_toy.py \\
    -k buffers
A builder must start with every slot id -1.

Result (H200, 2026-12-07):
  width 512: 4.20 -> 4.10 us
  width 8192: unchanged"""


def test_body_in_the_0_34_template(tmp_path: Path) -> None:
    """0.34.0's template: Overview / Claims / Validation / Details, its
    checklist's AI box ticked; the message unwrapped; short."""
    template = sources.read_members("0.34.0", [TEMPLATE_0_34])[TEMPLATE_0_34]
    assert template is not None
    ev = _evidence(tmp_path, EVIDENCE)
    part = pr_body.Part("0003", ev.patch, MESSAGE, ev, Path("docs/pr-evidence/v0.34.0/0003.md"))
    b = _body_input(parts=[part], touches_outputs=["_build_c128a_topk_metadata_kernel"])
    body = pr_body.render(b, template.decode())
    assert_fit_to_open(body)
    s = sections_of(body, NEW_SECTIONS)
    assert s["## Overview"].startswith("Toy: initialise the buffers (vLLM v0.34.0).")
    assert s["## Claims"].splitlines() == [
        "- The test under Validation on v0.34.0: `1 failed in 4.20s`; "
        "with this change: `1 passed in 4.10s`.",
        "- Build time unchanged (5.1 us both).",
    ]
    v = s["## Validation"]
    # The plan's command, its words, then the evidence: its command is the
    # plan's (continuation aside), so it is not repeated.
    assert v.startswith(
        "```bash\npytest -v -s tests/kernels/test_toy.py \\\n  -k buffers\n```\n\n"
        "A builder must start with every slot id -1.\n\n**v0.34.0**, pristine"
    )
    assert "Run as:" not in v
    assert "```text\nE   assert -17 == -1\n1 failed in 4.20s\n```" in v
    assert "Both on NVIDIA H200, Ubuntu 24.04; torch 2.14.0, triton 3.8.0; 2026-12-07." in v
    assert "### Build time unchanged (5.1 us both)" in v and "Median of 50 launches." in v
    assert "```bash\npython benchmarks/kernels/toy.py\n```" in v
    assert "2026-12-08" in v
    assert (
        "(ruff at its pin, 0.17.2), passed, except not run: `markdownlint-cli2`: cannot be "
        "fetched here." in v
    )
    d = s["## Details"]
    assert "allocates its buffers with torch.empty, so bytes" in d  # unwrapped
    assert '- Slot ids start as -1 ("no slot") and lengths as 0.' in d
    assert "Test plan" not in d and "pytest" not in d
    # The paragraph after the test plan is the message's again; its indented
    # lines stay lines.
    assert "Result (H200, 2026-12-07):\n\n```text\nwidth 512: 4.20 -> 4.10 us\nwidth 8192" in d
    assert "AI assistance was used" in d and f"The submitter, {JANE}" in d
    assert (
        "Model evaluation before and after (this changes `_build_c128a_topk_metadata_kernel`)" in d
    )
    assert "- [x] AI assistance was used during the creation of this PR." in body
    assert pr_body.word_count(body) <= 250
    config = sources.read_members("0.34.0", [".pre-commit-config.yaml"])[".pre-commit-config.yaml"]
    assert config is not None and b"frozen: v0.17.2" in config  # where "ruff 0.17.2" comes from
    assert not foreign_numbers(
        body, EVIDENCE, MESSAGE, template.decode(), config.decode(), "v0.34.0"
    )


def test_a_command_with_words_around_it_is_prose_not_a_shell_block(tmp_path: Path) -> None:
    """A measurement's command written as code spans with words between them
    would show its backticks inside a ```bash block: it goes in a sentence."""
    command = "`python benchmarks/kernels/toy.py`, then `python toy_check.py` (the toy's check)"
    text = EVIDENCE.replace(
        "- Command: `python benchmarks/kernels/toy.py`", f"- Command: {command}"
    )
    ev = _evidence(tmp_path, text)
    part = pr_body.Part("0003", ev.patch, MESSAGE, ev, Path("docs/pr-evidence/v0.34.0/0003.md"))
    v = pr_body.validation(_body_input(parts=[part]))
    assert f"Command: {command}" in v
    assert "```bash\n`" not in v


def test_claims_are_written_by_hand_or_pytest_summaries(tmp_path: Path) -> None:
    """A `Claim:` line is a Claims bullet as written; without one, a run's
    last line is quoted only where it is pytest's summary."""

    def claims(text: str) -> list[str]:
        ev = _evidence(tmp_path, text)
        part = pr_body.Part("0003", ev.patch, MESSAGE, ev, Path("e.md"))
        return pr_body.claims(_body_input(parts=[part])).splitlines()

    claimed = EVIDENCE.replace(
        "Patch: [Bugfix] Toy: initialise the buffers\n",
        "Patch: [Bugfix] Toy: initialise the buffers\nClaim: no garbage slot ids (-17 before)\n",
    )
    assert claims(claimed) == [
        "- no garbage slot ids (-17 before)",
        "- Build time unchanged (5.1 us both).",
    ]
    bench = EVIDENCE.replace("1 failed in 4.20s", "took 4.20 us").replace(
        "1 passed in 4.10s", "took 4.10 us"
    )
    assert claims(bench) == ["- Build time unchanged (5.1 us both)."]
    bare = bench.split("## Measurement")[0]
    assert claims(bare) == ["- Toy: initialise the buffers."]


def test_dry_run_body_says_what_is_missing() -> None:
    part = pr_body.Part("0003", "[Bugfix] Toy", MESSAGE, None, Path("docs/x/0003.md"))
    dep = ("0001", "[Bugfix] Toy: first", "dsv4-warmup/first", ["its hunks in a.py do not apply"])
    body = pr_body.render(_body_input(parts=[part], depends=[dep]), pr_body.FALLBACK_TEMPLATE)
    assert_fit_to_open(body)
    assert "No evidence yet (dry run): `docs/x/0003.md` is missing." in body
    assert "**Dry run: no evidence file** `docs/x/0003.md`" in body
    assert "```bash\npytest -v -s tests/kernels/test_toy.py \\\n  -k buffers\n```" in body
    assert (
        "Stacked on 0001, *[Bugfix] Toy: first* (branch `dsv4-warmup/first`; "
        "its hunks in a.py do not apply): merge that first." in body
    )


def test_unwrap_joins_wrapped_lines_and_keeps_quoted_ones() -> None:
    text = (
        "The line now says:\n\n  finished in 1.30s: compiled 0\n  and loaded 2.\n\n"
        "A wrapped\nparagraph.\n- an item\n  continued\n- another"
    )
    assert pr_body.unwrap(text) == (
        "The line now says:\n\n```text\nfinished in 1.30s: compiled 0\nand loaded 2.\n```\n\n"
        "A wrapped paragraph.\n- an item continued\n- another"
    )


def test_lint_finds_open_fences_and_lab_words() -> None:
    assert pr_body.lint("```bash\nx\n```\n") == []
    assert pr_body.lint("````\n```\nstill code\n````\n") == []  # a longer fence holds ```
    assert pr_body.fence_problems("```text\nx\n") == [
        "the code fence opened at line 1 is never closed"
    ]
    assert pr_body.fence_problems("~~~\nx\n```\n") != []  # ``` does not close ~~~
    assert any("'Session'" in p for p in pr_body.lint("Session 21 measured it.\n"))
    assert pr_body.lint("<details>\nx\n") == ["unbalanced <details> blocks"]


def test_word_count_skips_code_comments_and_the_template_checklist() -> None:
    body = "<!-- a b c -->\nOne two three.\n\n```text\nfour five\n```\n<details>\nsix\n</details>\n"
    assert pr_body.word_count(body) == 3


def test_frozen_revs_name_their_release(tmp_path: Path) -> None:
    """0.34.0 pins hook repositories to commits, the release in a comment."""
    (tmp_path / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: https://github.com/astral-sh/ruff-pre-commit\n"
        f"  rev: {'f' * 40}  # frozen: v0.17.2\n  hooks:\n  - id: ruff-check\n"
        "- repo: https://github.com/crate-ci/typos\n"
        f"  rev: {'9' * 40}  # v1.51.1\n  hooks:\n  - id: typos\n"
    )
    assert pr_mod.pinned_ruff_version(tmp_path) == "0.17.2"
    assert pr_hooks.pinned_rev(tmp_path, "crate-ci/typos") == "1.51.1"
    (tmp_path / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: https://github.com/astral-sh/ruff-pre-commit\n"
        f"  rev: {'f' * 40}\n  hooks:\n  - id: ruff-check\n"
    )
    with pytest.raises(pr_mod.PrError, match="no release named"):
        pr_mod.pinned_ruff_version(tmp_path)


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
    assert {r.hook.id: r.new_lines for r in only_old}["no-todo"] == ["src/old.py:3: TODO found"]
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
