"""`make wheel`: a patched vLLM wheel, installable with pip, with a correct RECORD.

The fast tests build a small synthetic "official" vLLM wheel and a synthetic
series in tmp dirs (paths.py reads DSV4_PATCHES_DIR / DSV4_OVERLAY_DIR at
import, so the command runs in a subprocess); a second synthetic series changes
the requirement files setup.py reads. The slow test runs the real series on
the real official x86_64 wheel of each base (the frozen ones with
``make test-frozen``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from dsv4warmup import series as series_mod
from dsv4warmup import trees
from dsv4warmup import wheel as wheel_mod
from helpers import base_params, git
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LABEL = r"dsv4warmup\.\d+\.g[0-9a-f]{8}"

PRISTINE = {
    "vllm/__init__.py": '"""Synthetic vLLM."""\n',
    "vllm/models/__init__.py": "",
    "vllm/models/deepseek_v4/__init__.py": "",
    "vllm/models/deepseek_v4/sparse_mla.py": textwrap.dedent('''\
        """Synthetic stand-in for the real module."""


        def build_metadata(n: int) -> list[int]:
            buf = [7] * n  # left-over garbage
            return buf
        '''),
    "tests/test_sparse_mla.py": "def test_nothing() -> None:\n    pass\n",
}
PATCHED_SPARSE = textwrap.dedent('''\
    """Synthetic stand-in for the real module."""


    def _is_safe(i: int, n: int) -> bool:
        return 0 <= i < n


    def build_metadata(n: int) -> list[int]:
        buf = [0] * n  # zero-initialised
        return buf
    ''')
OVERLAY = {
    "vllm/model_executor/warmup/toy_warmup.py": "def warmup() -> str:\n    return 'warm'\n",
    "tests/toy/test_toy_warmup.py": "def test_warm() -> None:\n    pass\n",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A synthetic v0.26.0 series (one patch: a vllm/ edit + a tests/ edit,
    with a vllm/ and a tests/ overlay file) and a synthetic official wheel."""
    tmp = tmp_path_factory.mktemp("synthetic")
    dev = tmp / "dev"
    _write(dev, PRISTINE)
    git(dev, "init", "-q")
    git(dev, "add", "-A")
    git(dev, "commit", "-q", "-m", "pristine")
    _write(
        dev,
        {
            "vllm/models/deepseek_v4/sparse_mla.py": PATCHED_SPARSE,
            "tests/test_sparse_mla.py": PRISTINE["tests/test_sparse_mla.py"] + "# edited\n",
        },
    )
    git(dev, "commit", "-q", "-a", "-s", "-m", "[Kernel] Zero-init and guard the metadata\n\nWhy.")
    patches = tmp / "patches"
    (patches / "v0.26.0").mkdir(parents=True)
    mail = git(dev, "format-patch", "-1", "--stdout", "--zero-commit", "--full-index", "HEAD")
    (patches / "v0.26.0" / "0001-zero-init.patch").write_text(mail)
    (patches / "v0.26.0" / "series").write_text(
        "0001-zero-init.patch\n" + "".join(f"  + {rel}\n" for rel in OVERLAY)
    )
    overlay = tmp / "overlay"
    _write(overlay, OVERLAY)
    sparse = "vllm/models/deepseek_v4/sparse_mla.py"
    digest = hashlib.sha256(PRISTINE[sparse].encode()).hexdigest()
    (patches / "fingerprints.json").write_text(json.dumps({"0.26.0": {sparse: digest}}))

    official = make_wheel(tmp / "official", "vllm", "0.26.0", PRISTINE)
    return {"tmp": tmp, "patches": patches, "overlay": overlay, "official": official}


def make_wheel(
    dest: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> Path:
    """A wheel laid out like vLLM's (vllm/ + dist-info), packed with `wheel pack`;
    ``requires`` its Requires-Dist lines. tests/ files are not part of it."""
    root = dest / f"{name}-{version}"
    _write(root, {rel: text for rel, text in files.items() if rel.startswith("vllm/")})
    info = root / f"{name}-{version}.dist-info"
    requires_dist = "".join(f"Requires-Dist: {r}\n" for r in requires)
    _write(
        info,
        {
            "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: synthetic\n{requires_dist}\nThe description.\nRequires-Dist: prose\n",
            "WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        },
    )
    subprocess.run(
        [sys.executable, "-m", "wheel", "pack", "-d", str(dest), str(root)],
        check=True,
        capture_output=True,
    )
    (whl,) = dest.glob(f"{name}-{version}-*.whl")
    return whl


def run_wheel(syn: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        DSV4_PATCHES_DIR=str(syn["patches"]),
        DSV4_OVERLAY_DIR=str(syn["overlay"]),
        DSV4_BUILD_DIR=str(syn["tmp"] / "build"),
        PYTHONPATH=str(REPO / "scripts"),
    )
    return subprocess.run(
        [sys.executable, "-m", "dsv4warmup", "wheel", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=syn["tmp"],
    )


def venv(path: Path, parent_site: bool = False) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    py = path / "bin" / "python"
    if parent_site:  # this env's packages (torch, ...) behind the venv's own
        site = subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(site, "_parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


def pip(py: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "--disable-pip-version-check", *args],
        check=False,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def built(synthetic: dict[str, Path]) -> Path:
    dest = synthetic["tmp"] / "dist"
    res = run_wheel(synthetic, "--wheel", str(synthetic["official"]), "--dest", str(dest))
    assert res.returncode == 0, res.stderr
    (whl,) = dest.glob("*.whl")
    assert (
        "not part of a wheel (left out): tests/toy/test_toy_warmup.py, tests/test_sparse_mla.py"
        in res.stdout
    )
    return whl


def test_version_has_the_local_label(built: Path) -> None:
    info = wheel_mod.read_info(built)
    assert built.name.startswith("vllm-0.26.0+dsv4warmup.1.g")
    assert built.name.endswith("-py3-none-any.whl")
    import re

    assert re.fullmatch(rf"0\.26\.0\+{LABEL}", str(info.version))
    assert info.dist_info == f"vllm-{info.version}.dist-info"


def test_record_verifies(built: Path, tmp_path: Path) -> None:
    assert wheel_mod.verify_record(built) == []
    # The verifier catches a file changed behind RECORD's back, and an unlisted one.
    bad = tmp_path / built.name
    with zipfile.ZipFile(built) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("sparse_mla.py"):
                data += b"# tampered\n"
            dst.writestr(item, data)
        dst.writestr("vllm/sneaked_in.py", "x = 1\n")
    problems = wheel_mod.verify_record(bad)
    assert any("sparse_mla.py: sha256 differs" in p for p in problems)
    assert any("sparse_mla.py: size" in p for p in problems)
    assert any("vllm/sneaked_in.py is not listed" in p for p in problems)


def test_contents(built: Path) -> None:
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
        assert zf.read("vllm/models/deepseek_v4/sparse_mla.py").decode() == PATCHED_SPARSE
        assert (
            zf.read("vllm/model_executor/warmup/toy_warmup.py").decode()
            == OVERLAY["vllm/model_executor/warmup/toy_warmup.py"]
        )
    assert not any(n.startswith("tests/") for n in names)


def test_installs_and_imports(built: Path, tmp_path: Path) -> None:
    py = venv(tmp_path / "venv")
    res = pip(py, "install", "--no-deps", "--no-index", "-q", str(built))
    assert res.returncode == 0, res.stderr
    res = pip(py, "check")
    assert res.returncode == 0, res.stdout + res.stderr
    probe = textwrap.dedent("""\
        import importlib.metadata as md, pathlib
        import vllm, vllm.models.deepseek_v4.sparse_mla as m
        from vllm.model_executor.warmup.toy_warmup import warmup
        assert m._is_safe(0, 1) and not m._is_safe(1, 1)
        assert m.build_metadata(3) == [0, 0, 0]
        assert warmup() == "warm"
        site = pathlib.Path(vllm.__file__).parents[1]
        assert not (site / "tests").exists()
        print(md.version("vllm"), vllm.__file__)
        """)
    res = subprocess.run(
        [str(py), "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert res.returncode == 0, res.stderr
    version, where = res.stdout.split()
    assert version == wheel_mod.read_info(built).metadata_version
    assert str(tmp_path / "venv") in where
    res = pip(py, "show", "-f", "vllm")
    assert "vllm/models/deepseek_v4/sparse_mla.py" in res.stdout


def test_refuses_an_already_patched_wheel(
    synthetic: dict[str, Path], built: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dist"
    res = run_wheel(synthetic, "--wheel", str(built), "--dest", str(dest))
    assert res.returncode == 1
    assert "already patched" in res.stderr and "+dsv4warmup" in res.stderr
    assert not dest.exists()

    # The same content with the label taken off: recognised by the series
    # applying in reverse.
    unpacked = tmp_path / "unpacked"
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(unpacked), str(built)],
        check=True,
        capture_output=True,
    )
    (root,) = unpacked.iterdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "wheel",
            "pack",
            "--local-version",
            "",
            "-d",
            str(tmp_path),
            str(root),
        ],
        check=True,
        capture_output=True,
    )
    (relabelled,) = tmp_path.glob("vllm-0.26.0-*.whl")
    res = run_wheel(synthetic, "--wheel", str(relabelled), "--dest", str(dest))
    assert res.returncode == 1
    assert "already carries the v0.26.0 series" in res.stderr
    assert not dest.exists()


def test_refuses_unsupported_and_mismatched(synthetic: dict[str, Path], tmp_path: Path) -> None:
    dest = tmp_path / "dist"
    other = make_wheel(tmp_path / "w33", "vllm", "0.33.0", PRISTINE)
    res = run_wheel(synthetic, "--wheel", str(other), "--dest", str(dest))
    assert res.returncode == 1
    assert "vLLM 0.33.0 is not supported" in res.stderr and "0.26.0" in res.stderr

    res = run_wheel(
        synthetic, "--base", "0.33.0", "--dest", str(dest)
    )  # refused before any download
    assert res.returncode == 1 and "vLLM 0.33.0 is not supported" in res.stderr

    res = run_wheel(
        synthetic, "--wheel", str(synthetic["official"]), "--base", "0.25.1", "--dest", str(dest)
    )
    assert res.returncode == 1 and "--base 0.25.1" in res.stderr

    foreign = make_wheel(tmp_path / "wx", "notvllm", "0.26.0", PRISTINE)
    res = run_wheel(synthetic, "--wheel", str(foreign), "--dest", str(dest))
    assert res.returncode == 1 and "not of vllm" in res.stderr

    files = dict(PRISTINE)
    files["vllm/models/deepseek_v4/sparse_mla.py"] = "def build_metadata(n):\n    return None\n"
    drifted = make_wheel(tmp_path / "wd", "vllm", "0.26.0", files)
    res = run_wheel(synthetic, "--wheel", str(drifted), "--dest", str(dest))
    assert res.returncode == 1
    assert (
        "0001-zero-init.patch" in res.stderr
        and "vllm/models/deepseek_v4/sparse_mla.py" in res.stderr
    )
    assert not dest.exists()


def test_local_edit_that_still_applies_warns(synthetic: dict[str, Path], tmp_path: Path) -> None:
    files = dict(PRISTINE)
    files["vllm/models/deepseek_v4/sparse_mla.py"] += "# a local addition\n"
    edited = make_wheel(tmp_path / "we", "vllm", "0.26.0", files)
    res = run_wheel(synthetic, "--wheel", str(edited), "--dest", str(tmp_path / "dist"))
    assert res.returncode == 0, res.stderr
    assert (
        "warning: vllm/models/deepseek_v4/sparse_mla.py differs from pristine vLLM 0.26.0"
        in res.stdout
    )
    (whl,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(whl) as zf:
        assert (
            zf.read("vllm/models/deepseek_v4/sparse_mla.py").decode()
            == PATCHED_SPARSE + "# a local addition\n"
        )


def test_verify_wheel_command(synthetic: dict[str, Path], built: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "scripts"))
    res = subprocess.run(
        [sys.executable, "-m", "dsv4warmup", "verify-wheel", str(built)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0 and "RECORD verifies" in res.stdout


# --------------------------------------------------------------------------
# Requirement changes: setup.py's requirement files -> METADATA's Requires-Dist

REQ_PRISTINE = {
    "requirements/common.txt": "regex\nnumpy >= 1.26\n",
    "requirements/cuda.txt": (
        "# CUDA\n-r common.txt\n--extra-index-url https://example.invalid/simple\n\n"
        "toy-kernels == 0.1.0 # the toy's kernels\n"
        'torch == 2.0; platform_machine == "x86_64"\n'
    ),
}
REQ_PATCHED = {
    "requirements/common.txt": "numpy >= 1.26\n",
    "requirements/cuda.txt": (
        "# CUDA\n-r common.txt\n\ntoy-extras >= 1.0\n"
        "toy-kernels == 0.2.0 # the toy's kernels\n"
        'torch == 2.0; platform_machine == "x86_64"\n'
    ),
}
# What setuptools writes for REQ_PRISTINE and an optional dependency; the
# changed pin last (a new requirement goes after it, not over it).
REQUIRES = (
    "regex",
    "numpy>=1.26",
    'pytest; extra == "test"',
    'torch==2.0; platform_machine == "x86_64"',
    "toy-kernels==0.1.0",
)


@pytest.fixture(scope="module")
def requirements_series(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A v0.26.0 series of two patches: 0001 the vllm/ edit, 0002 a change to
    both requirement files (a pin bumped, one requirement dropped, one added,
    an index option dropped)."""
    tmp = tmp_path_factory.mktemp("requirements")
    dev = tmp / "dev"
    _write(dev, {**PRISTINE, **REQ_PRISTINE})
    git(dev, "init", "-q")
    git(dev, "add", "-A")
    git(dev, "commit", "-q", "-m", "pristine")
    _write(dev, {"vllm/models/deepseek_v4/sparse_mla.py": PATCHED_SPARSE})
    git(dev, "commit", "-q", "-a", "-s", "-m", "[Kernel] Zero-init the metadata\n\nWhy.")
    _write(dev, REQ_PATCHED)
    git(dev, "commit", "-q", "-a", "-s", "-m", "[CI/Build] Bump the toy kernels\n\nWhy.")
    patches = tmp / "patches"
    (patches / "v0.26.0").mkdir(parents=True)
    names = ["0001-zero-init.patch", "0002-bump-toy-kernels.patch"]
    for n, name in enumerate(names):
        rev = f"HEAD~{1 - n}"
        mail = git(dev, "format-patch", "-1", "--stdout", "--zero-commit", "--full-index", rev)
        (patches / "v0.26.0" / name).write_text(mail)
    (patches / "v0.26.0" / "series").write_text("".join(f"{n}\n" for n in names))
    (tmp / "overlay").mkdir()
    return {"tmp": tmp, "patches": patches, "overlay": tmp / "overlay"}


def test_changed_lines_follow_the_hunk_counts(requirements_series: dict[str, Path]) -> None:
    patch = series_mod.Patch(requirements_series["patches"] / "v0.26.0/0002-bump-toy-kernels.patch")
    removed, added = patch.changed_lines("requirements/cuda.txt")
    # "---extra-index-url" in the mail is a removed line, not a file header
    assert removed == [
        "--extra-index-url https://example.invalid/simple",
        "toy-kernels == 0.1.0 # the toy's kernels",
    ]
    assert added == ["toy-extras >= 1.0", "toy-kernels == 0.2.0 # the toy's kernels"]
    assert patch.changed_lines("requirements/common.txt") == (["regex"], [])
    assert patch.changed_lines("vllm/models/deepseek_v4/sparse_mla.py") == ([], [])


def _requires_dist(whl: Path) -> list[str]:
    with zipfile.ZipFile(whl) as zf:
        head = zf.read(f"{wheel_mod.read_info(whl).dist_info}/METADATA").decode()
    head = head.split("\n\n", 1)[0]
    return [
        ln.split(":", 1)[1].strip() for ln in head.splitlines() if ln.startswith("Requires-Dist:")
    ]


def test_requirement_changes_reach_requires_dist(
    requirements_series: dict[str, Path], tmp_path: Path
) -> None:
    official = make_wheel(tmp_path / "official", "vllm", "0.26.0", PRISTINE, REQUIRES)
    dest = tmp_path / "dist"
    res = run_wheel(requirements_series, "--wheel", str(official), "--dest", str(dest))
    assert res.returncode == 0, res.stderr
    (whl,) = dest.glob("*.whl")
    assert _requires_dist(whl) == [
        "numpy>=1.26",
        'pytest; extra == "test"',
        'torch==2.0; platform_machine == "x86_64"',
        "toy-kernels==0.2.0",  # in its place
        "toy-extras>=1.0",
    ]
    with zipfile.ZipFile(whl) as zf:  # the description is not METADATA's header
        assert (
            "Requires-Dist: prose"
            in zf.read(f"{wheel_mod.read_info(whl).dist_info}/METADATA").decode()
        )
    assert wheel_mod.verify_record(whl) == []
    bump = "0002-bump-toy-kernels.patch"
    assert f"requires regex -> (removed)  (requirements/common.txt, {bump})" in res.stdout
    assert (
        f"requires toy-kernels==0.1.0 -> toy-kernels==0.2.0  (requirements/cuda.txt, {bump})"
        in res.stdout
    )
    assert f"requires (new) -> toy-extras>=1.0  (requirements/cuda.txt, {bump})" in res.stdout
    assert "not part of a wheel" not in res.stdout


def test_a_wheel_that_does_not_require_the_changed_pin_is_refused(
    requirements_series: dict[str, Path], tmp_path: Path
) -> None:
    other_pin = tuple(r.replace("0.1.0", "0.0.9") for r in REQUIRES)
    official = make_wheel(tmp_path / "official", "vllm", "0.26.0", PRISTINE, other_pin)
    dest = tmp_path / "dist"
    res = run_wheel(requirements_series, "--wheel", str(official), "--dest", str(dest))
    assert res.returncode == 1
    assert (
        "0002-bump-toy-kernels.patch changes toy-kernels==0.1.0 in requirements/cuda.txt, "
        "but the wheel does not require it (its METADATA requires toy-kernels==0.0.9)"
    ) in res.stderr
    assert not dest.exists()


# --------------------------------------------------------------------------
# The real thing: official x86_64 wheels + the real series


@pytest.fixture
def big_tmp(tmp_path: Path):
    """tmp_path, emptied afterwards (an installed vLLM is ~1 GB)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def _setup_requirements(tree: Path) -> dict[str, str]:
    """What setup.py reads from a CUDA tree's requirement files, by project."""
    out = {}
    for rel in ("requirements/common.txt", "requirements/cuda.txt"):
        for line in (tree / rel).read_text().splitlines():
            text = line.split(" #")[0].strip()
            if text and not text.startswith(("#", "-")):
                req = Requirement(text)
                out[canonicalize_name(req.name)] = str(req)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("base", base_params(["0.34.0", "0.26.0"]))
def test_real_official_wheel(base: str, big_tmp: Path) -> None:
    if base not in series_mod.available_bases():
        pytest.skip(f"the real patches/v{base} series does not exist yet")
    tmp_path = big_tmp
    official = wheel_mod.official_wheel(base)  # cached under .cache/wheel/
    built = wheel_mod.build(official, base, tmp_path / "dist")
    assert wheel_mod.verify_record(built.path) == []
    assert built.path.name.endswith("-cp38-abi3-manylinux_2_28_x86_64.whl")
    assert str(wheel_mod.read_info(built.path).version) == built.version
    # pip installs what the series pins: Requires-Dist is the official one with
    # each requirement the patched tree's requirement files change, changed
    s = series_mod.load(base)
    before = _setup_requirements(trees.pristine_tree(base))
    after = _setup_requirements(trees.patched_tree(base))
    want = [
        after.get(n, "") if before.get(n) == r and after.get(n) != r else r
        for r in _requires_dist(official)
        for n in [canonicalize_name(Requirement(r).name)]
    ]
    want = [r for r in want if r] + [r for n, r in after.items() if n not in before]
    assert _requires_dist(built.path) == want
    if base == "0.34.0":  # its TileLang bump (0012)
        assert "tilelang==0.1.15" in want and "tilelang==0.1.12" not in want

    # Install next to (in front of) this env's packages: torch, triton and
    # vLLM's pure dependencies come from here, vllm from the patched wheel.
    py = venv(tmp_path / "venv", parent_site=True)
    res = pip(py, "install", "--no-deps", "--no-index", "--no-compile", "-q", str(built.path))
    assert res.returncode == 0, res.stderr
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )

    # Installed files are byte-identical to the patched source tree's.
    patched = trees.patched_tree(base)
    wanted = [f for f in [*s.touched_files, *s.overlay_files] if f.startswith("vllm/")]
    assert wanted
    for rel in wanted:
        assert (site / rel).read_bytes() == (patched / rel).read_bytes(), rel
        compile((site / rel).read_text(), rel, "exec")
    sparse = (site / "vllm/models/deepseek_v4/sparse_mla.py").read_text()
    if "_is_safe" in (patched / "vllm/models/deepseek_v4/sparse_mla.py").read_text():
        assert "_is_safe" in sparse

    # Import the patched module from the installed wheel (no PYTHONPATH, not
    # from the repo): vllm's compiled extensions need CUDA torch and are not
    # loaded on the way to this module.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSV4_VLLM_TREE")}
    probe = (
        "import vllm.models.deepseek_v4.sparse_mla as m, importlib.metadata as md; "
        "print(m.__file__); print(md.version('vllm'))"
    )
    res = subprocess.run(
        [str(py), "-c", probe], check=False, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert res.returncode == 0, res.stderr[-3000:]
    where, version = res.stdout.split()[-2:]
    assert where == str(site / "vllm/models/deepseek_v4/sparse_mla.py")
    assert version == built.version


def test_every_supported_base_has_its_official_wheel() -> None:
    """`make wheel BASE=<base>` can fetch the official x86_64 wheel of every
    base a series exists for (0.34.0's is known ahead of its series)."""
    from dsv4warmup import sources

    bases = series_mod.available_bases()
    assert set(bases) | {"0.34.0"} <= set(wheel_mod.OFFICIAL_WHEELS)
    assert set(wheel_mod.OFFICIAL_WHEELS) <= set(sources.SDIST_SHA256)
    for base, (filename, sha256) in wheel_mod.OFFICIAL_WHEELS.items():
        assert filename == f"vllm-{base}-cp38-abi3-manylinux_2_28_x86_64.whl"
        assert len(sha256) == 64 and int(sha256, 16) >= 0
    assert sources.DEFAULT_BASE in wheel_mod.OFFICIAL_WHEELS
