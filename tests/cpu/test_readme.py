"""The README's numbers that follow from the series: the patches of each base,
and what `make apply` and `make wheel` print for the primary base. They went
stale once already (the wheel line said 12 patches and 11 files when the
series had 15 patches touching 14 of vLLM's files)."""

from __future__ import annotations

import re

from dsv4warmup import series as series_mod
from dsv4warmup.paths import REPO

README = (REPO / "README.md").read_text()
PRIMARY = "0.34.0"


def test_the_base_table_counts_each_series_patches() -> None:
    rows = {
        m["bases"]: m["count"]
        for m in re.finditer(
            r"^\| \**(?P<bases>[0-9., ]+?)\** \|[^\n]*\| (?P<count>\d+) patches", README, re.M
        )
    }
    assert rows, "the README's table of bases was not found"
    for bases, count in rows.items():
        for base in bases.split(", "):
            assert len(series_mod.load(base).patches) == int(count), (base, count)
    assert {base for bases in rows for base in bases.split(", ")} == set(
        series_mod.available_bases()
    )


def test_the_primary_bases_quoted_outputs_carry_its_counts() -> None:
    series = series_mod.load(PRIMARY)
    patches = len(series.patches)
    overlay = len(series.overlay_files)
    applied = re.findall(
        rf"applied the v{re.escape(PRIMARY)} series \((\d+) patches, (\d+) overlay files\)", README
    )
    assert applied and set(applied) == {(str(patches), str(overlay))}, applied
    versions = re.findall(rf"{re.escape(PRIMARY)}\+dsv4warmup\.(\d+)\.g<digest>", README)
    assert versions and set(versions) == {str(patches)}, versions
    files = re.findall(
        rf"{re.escape(PRIMARY)}\+dsv4warmup\.\d+\.g<digest>: (\d+) files patched", README
    )
    vllm_files = [path for path in series.touched_files if path.startswith("vllm/")]
    assert files == [str(len(vllm_files))], files
