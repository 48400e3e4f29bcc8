"""`make pr`: per patch a `git am` branch and a PR body, after sign-off,
apply-in-order and vLLM-ruff checks.

The real series is exported for every base that exists. Synthetic series
(tmp dirs, passed through DSV4_PATCHES_DIR / DSV4_OVERLAY_DIR to a
subprocess) against the real 0.26.0 sdist check the dependency statement,
the measured figures and that the checker refuses what it must.
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
from dsv4warmup import series as series_mod
from dsv4warmup import sources
from helpers import git

REPO = Path(__file__).resolve().parents[2]
BASES = series_mod.available_bases()
SECTIONS = ("## Purpose", "## Test Plan", "## Test Result")

SPARSE = "vllm/models/deepseek_v4/sparse_mla.py"
CACHE_UTILS = "vllm/models/deepseek_v4/common/ops/cache_utils.py"
MTP_NORM = "vllm/models/deepseek_v4/common/ops/fused_mtp_input_rmsnorm.py"


def sections_of(body: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for head in SECTIONS:
        assert head in body, head
        text = body.split(head, 1)[1]
        out[head] = re.split(r"^(?:## |---$)", text, maxsplit=1, flags=re.MULTILINE)[0].strip()
    return out


# --------------------------------------------------------------------------
# The real series


@pytest.fixture(
    scope="module",
    params=BASES
    or [pytest.param(None, marks=pytest.mark.skip(reason="no real patch series exists yet"))],
)
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    base = request.param
    out = tmp_path_factory.mktemp(f"pr-{base}")
    prs = pr_mod.export(base, out)  # raises PrError on any failed check
    return base, out / f"v{base}", prs


def test_every_patch_has_a_pr(exported) -> None:
    base, dest, prs = exported
    s = series_mod.load(base)
    assert [p.patch.name for p in prs] == [p.name for p in s.patches]
    repo = dest / "vllm"
    for pr in prs:
        body = (dest / f"{pr.number}-{pr.slug}.md").read_text()
        filled = sections_of(body)
        assert all(filled.values()), pr.patch.name
        subject, _, signoffs = pr_mod.message(pr.patch)
        assert signoffs, pr.patch.name
        assert subject in body and "Depends on" in filled["## Purpose"]
        assert "pre-commit run --files" in filled["## Test Plan"]
        assert "ruff check" in filled["## Test Result"]
        # The branch: the patches it depends on, then this one, each signed off.
        log = (
            git(
                repo,
                "log",
                "--format=%s%x09%(trailers:key=Signed-off-by,valueonly,separator=%x2C)",
                f"v{base}..{pr.branch}",
            )
            .strip()
            .splitlines()
        )
        assert len(log) == len(pr.deps) + 1
        assert all(line.split("\t")[1].strip() for line in log)
        assert log[0].split("\t")[0] in subject
        for dep in pr.deps:
            assert f"{dep.name[:4]} " in filled["## Purpose"]
    series_log = git(repo, "log", "--format=%s", f"v{base}..dsv4-warmup/v{base}").splitlines()
    assert len(series_log) == len(s.patches)


def test_bodies_are_ruff_checked_with_the_pinned_version(exported) -> None:
    _, dest, prs = exported
    pin = pr_mod.pinned_ruff_version(dest / "vllm")
    for pr in prs:
        body = (dest / f"{pr.number}-{pr.slug}.md").read_text()
        if pin:
            assert f"ruff {pin}" in body


# --------------------------------------------------------------------------
# Synthetic series against the real 0.26.0 sdist


def make_series(tmp: Path, patches: list[dict]) -> tuple[Path, Path]:
    """patches: dicts with subject, signoff, append {path: text}, replace
    {path: (old, new)}, overlay {path: text}, mangle(mail) -> mail."""
    paths = sorted(
        {p for spec in patches for p in [*spec.get("append", {}), *spec.get("replace", {})]}
    )
    pristine = sources.read_members("0.26.0", paths)
    dev = tmp / "dev"
    for rel, data in pristine.items():
        assert data is not None, rel
        (dev / rel).parent.mkdir(parents=True, exist_ok=True)
        (dev / rel).write_bytes(data)
    git(dev, "init", "-q")
    git(dev, "add", "-A")
    git(dev, "commit", "-q", "-m", "pristine")
    series_dir = tmp / "patches" / "v0.26.0"
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
        git(
            dev,
            "commit",
            "-q",
            "-a",
            *(["-s"] if spec.get("signoff", True) else []),
            "-m",
            f"{spec['subject']}\n\nWhy this matters, in a few words.",
        )
        name = f"{number:04d}-{spec.get('slug', f'change-{number}')}.patch"
        mail = git(dev, "format-patch", "-1", "--stdout", "--zero-commit", "--full-index", "HEAD")
        (series_dir / name).write_text(spec.get("mangle", lambda m: m)(mail))
        lines.append(name)
        for rel, text in spec.get("overlay", {}).items():
            (overlay / rel).parent.mkdir(parents=True, exist_ok=True)
            (overlay / rel).write_text(text)
            lines.append(f"  + {rel}")
    (series_dir / "series").write_text("\n".join(lines) + "\n")
    return tmp / "patches", overlay


def run_pr(
    patches: Path, overlay: Path, out: Path, results: Path
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        DSV4_PATCHES_DIR=str(patches),
        DSV4_OVERLAY_DIR=str(overlay),
        PYTHONPATH=str(REPO / "scripts"),
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dsv4warmup",
            "pr",
            "--base",
            "0.26.0",
            "--out",
            str(out),
            "--results",
            str(results),
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )


KEYS_MODULE = textwrap.dedent('''\
    # SPDX-License-Identifier: Apache-2.0
    """Toy warmup keys."""


    def toy_keys() -> list[int]:
        return [1, 16]
    ''')
GUARD = textwrap.dedent('''\


    def _toy_guard(i: int, n: int) -> bool:
        """Bounds guard for _build_c128a_topk_metadata_kernel indices."""
        return 0 <= i < n
    ''')
USES_KEYS = textwrap.dedent("""\


    def _toy_warmup_keys() -> list[int]:
        from vllm.model_executor.warmup.toy_keys import toy_keys

        return toy_keys()
    """)
SECOND_GUARD = textwrap.dedent("""\


    def _toy_guard_all(idx: list[int], n: int) -> bool:
        return all(_toy_guard(i, n) for i in idx)
    """)
NORM = textwrap.dedent("""\


    def _toy_norm_cases() -> tuple[int, ...]:
        return (1, 2, 16)
    """)
RESULTS = textwrap.dedent("""\
    # GPU results

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
                "subject": "[Kernel] Toy: guard the c128a indices",
                "slug": "guard",
                "append": {SPARSE: GUARD},
                "overlay": {"vllm/model_executor/warmup/toy_keys.py": KEYS_MODULE},
            },
            {
                "subject": "[Kernel] Toy: warm up with the keys",
                "slug": "keys",
                "append": {CACHE_UTILS: USES_KEYS},
            },
            {
                "subject": "[Kernel] Toy: guard all indices",
                "slug": "guard-all",
                "append": {SPARSE: SECOND_GUARD},
            },
            {
                "subject": "[Spec Decode] Toy: count the RMSNorm cases",
                "slug": "norm",
                "append": {MTP_NORM: NORM},
                "overlay": {
                    "tests/toy/test_toy_norm.py": "def test_toy() -> None:\n    assert 1 + 1 == 2\n"
                },
            },
            # Same file as 0001/0003, another place: no dependency.
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
            # Appends after 0002's lines without using them: a textual dependency.
            {
                "subject": "[Kernel] Toy: after the keys",
                "slug": "after",
                "append": {CACHE_UTILS: NORM},
            },
        ],
    )
    (tmp / "gpu-results.md").write_text(RESULTS)
    out = tmp / "out"
    res = run_pr(patches, overlay, out, tmp / "gpu-results.md")
    assert res.returncode == 0, res.stderr
    return out / "v0.26.0", res.stdout


def test_synthetic_dependencies_and_bodies(good) -> None:
    dest, stdout = good
    bodies = {p.name.split("-")[0]: p.read_text() for p in dest.glob("*.md")}
    assert sorted(bodies) == ["0001", "0002", "0003", "0004", "0005", "0006"]
    assert "0001 dsv4-warmup/guard  depends on: none" in stdout
    assert "0002 dsv4-warmup/keys  depends on: 0001" in stdout  # imports 0001's module
    assert "0003 dsv4-warmup/guard-all  depends on: 0001" in stdout  # same file
    assert "0004 dsv4-warmup/norm  depends on: none" in stdout
    assert "0005 dsv4-warmup/align  depends on: none" in stdout  # its hunk applies alone
    assert (
        "0006 dsv4-warmup/after  depends on: 0001, 0002" in stdout
    )  # 0002's context, and its needs

    purpose = sections_of(bodies["0002"])["## Purpose"]
    assert "Depends on" in purpose and "0001 [Kernel] Toy: guard the c128a indices" in purpose
    assert "Depends on** nothing" in sections_of(bodies["0004"])["## Purpose"]

    # Measured figures come from the results file, matched by kernel or subject.
    assert "812 ms -> 95 ms" in sections_of(bodies["0001"])["## Test Result"]
    assert "| 3 | 0 |" in sections_of(bodies["0004"])["## Test Result"]
    assert "not yet measured" in sections_of(bodies["0002"])["## Test Result"]
    assert "812 ms" not in bodies["0002"] and "nothing to see" not in "".join(bodies.values())

    assert "tests/toy/test_toy_norm.py" in sections_of(bodies["0004"])["## Test Plan"]
    for body in bodies.values():
        assert "PLEASE FILL IN" not in body
        assert "Essential Elements of an Effective PR Description Checklist" in body

    repo = dest / "vllm"
    files = git(repo, "show", "--format=", "--name-only", "dsv4-warmup/guard").split()
    assert sorted(files) == sorted([SPARSE, "vllm/model_executor/warmup/toy_keys.py"])
    assert len(git(repo, "log", "--format=%H", "v0.26.0..dsv4-warmup/keys").split()) == 2
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "dsv4-warmup/v0.26.0"


def test_synthetic_without_results_says_not_yet_measured(tmp_path: Path) -> None:
    patches, overlay = make_series(
        tmp_path, [{"subject": "[Kernel] Toy: guard", "slug": "guard", "append": {SPARSE: GUARD}}]
    )
    res = run_pr(patches, overlay, tmp_path / "out", tmp_path / "absent.md")
    assert res.returncode == 0, res.stderr
    body = (tmp_path / "out" / "v0.26.0" / "0001-guard.md").read_text()
    assert "GPU figures: not yet measured." in sections_of(body)["## Test Result"]


def test_checker_refuses_bad_patches(tmp_path: Path) -> None:
    patches, overlay = make_series(
        tmp_path,
        [
            {
                "subject": "[Kernel] Toy: unsigned",
                "slug": "unsigned",
                "signoff": False,
                "append": {SPARSE: GUARD},
            },
            {
                "subject": "[Kernel] Toy: misformatted",
                "slug": "misformatted",
                "append": {CACHE_UTILS: "\n\ndef _toy(x):\n    return [x,x+1]\n"},
            },
            {
                "subject": "[Kernel] Toy: unused import",
                "slug": "unused",
                "append": {MTP_NORM: "\n\ndef _toy_unused() -> None:\n    import os\n"},
            },
            {
                "subject": "[Kernel] Toy: bad overlay",
                "slug": "bad-overlay",
                "append": {MTP_NORM: NORM},
                "overlay": {"vllm/toy_bad.py": "x=1\n"},
            },
        ],
    )
    out = tmp_path / "out"
    res = run_pr(patches, overlay, out, tmp_path / "absent.md")
    assert res.returncode == 1
    err = res.stderr
    assert "0001-unsigned.patch: no Signed-off-by" in err
    assert f"0002-misformatted.patch: {CACHE_UTILS}: ruff format would reformat it" in err
    assert f"0003-unused.patch: {MTP_NORM}:" in err and "F401" in err
    assert "0004-bad-overlay.patch: vllm/toy_bad.py: ruff format" in err
    assert not any(out.rglob("*.md")), "nothing is written when a check fails"
    assert not (out / "v0.26.0").exists()


def test_checker_refuses_a_patch_that_does_not_apply_in_order(tmp_path: Path) -> None:
    def mangle(mail: str) -> str:  # break one context line of the hunk
        lines = mail.splitlines(keepends=True)
        i = next(k for k, ln in enumerate(lines) if ln.startswith("@@"))
        j = next(
            k for k in range(i + 1, len(lines)) if lines[k].startswith(" ") and lines[k].strip()
        )
        lines[j] = lines[j].rstrip("\n") + "  # not in the file\n"
        return "".join(lines)

    patches, overlay = make_series(
        tmp_path,
        [
            {"subject": "[Kernel] Toy: guard", "slug": "guard", "append": {SPARSE: GUARD}},
            {
                "subject": "[Kernel] Toy: broken",
                "slug": "broken",
                "append": {MTP_NORM: NORM},
                "mangle": mangle,
            },
        ],
    )
    res = run_pr(patches, overlay, tmp_path / "out", tmp_path / "absent.md")
    assert res.returncode == 1
    assert "does not apply in order" in res.stderr and "0002-broken.patch" in res.stderr
    assert MTP_NORM in res.stderr


# --------------------------------------------------------------------------
# Pieces, in process


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


def test_fill_template_without_the_sections() -> None:
    filled = pr_mod.fill_template(
        "intro\n\n---\nfooter\n", {"Purpose": "P", "Test Plan": "T", "Test Result": "R"}
    )
    assert (
        filled.index("intro")
        < filled.index("## Purpose\n\nP")
        < filled.index("## Test Result\n\nR")
    )
    assert filled.index("## Test Result") < filled.index("---") < filled.index("footer")
