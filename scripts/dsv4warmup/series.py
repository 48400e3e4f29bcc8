"""The patch series of one base, and the overlay files each patch owns.

``patches/v<base>/series`` lists the ``git format-patch`` mails in order.
A line starting with ``+`` under a patch attributes an overlay file to that
patch: applying the series copies it into the tree, and the per-patch commit of
``MODE=am`` / ``make pr`` carries it. Every overlay file must be attributed
exactly once.

Overlay files live under the base's own overlay root: ``vllm_overlay/`` itself
(minus the ``v<version>/`` folders) for 0.25.1 and 0.26.0, which share their
files, and ``vllm_overlay/v<base>/`` for every later base (0.33.0 reworked the
modules our files sit beside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .generation import release_tuple
from .paths import OVERLAY, PATCHES

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@.*$", re.M)


class SeriesError(RuntimeError):
    pass


@dataclass(frozen=True)
class Hunk:
    path: str
    header: str
    old_start: int
    old_len: int


_BASE_DIR = re.compile(r"^v\d+\.\d+\.\d+$")


SHARED_OVERLAY_BASES = ("0.25.1", "0.26.0")


def overlay_root(base: str) -> Path:
    """Where the overlay files of ``base``'s series live."""
    base = base.removeprefix("v")
    return OVERLAY if base in SHARED_OVERLAY_BASES else OVERLAY / f"v{base}"


@dataclass
class Patch:
    path: Path
    overlay: list[str] = field(default_factory=list)
    overlay_dir: Path = OVERLAY

    def overlay_bytes(self, rel: str) -> bytes:
        return (self.overlay_dir / rel).read_bytes()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def text(self) -> str:
        return self.path.read_text()

    @property
    def subject(self) -> str:
        m = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n [^\n]*)*)", self.text, re.M)
        return " ".join(m.group(1).split()) if m else self.name

    @property
    def files(self) -> list[str]:
        return [b for _, b in _DIFF_HEADER.findall(self.text)]

    def _file_diffs(self) -> list[tuple[str, str]]:
        """(path, its ``diff --git`` block) per file the patch changes."""
        out = []
        for block in re.split(r"(?=^diff --git )", self.text, flags=re.M):
            m = _DIFF_HEADER.match(block)
            if m:
                out.append((m.group(2), block))
        return out

    @property
    def new_files(self) -> list[str]:
        return [
            path for path, block in self._file_diffs() if re.search(r"^new file mode", block, re.M)
        ]

    def changed_lines(self, rel: str) -> tuple[list[str], list[str]]:
        """The lines this patch removes from and adds to file ``rel``, read
        hunk by hunk with the hunk headers' line counts (so a removed line
        that starts with ``--`` is not taken for a header)."""
        removed: list[str] = []
        added: list[str] = []
        for path, block in self._file_diffs():
            if path != rel:
                continue
            lines = block.splitlines()
            i = 0
            while i < len(lines):
                h = _HUNK.match(lines[i])
                i += 1
                if not h:
                    continue
                old_left = int(h.group(2) or 1)
                new_left = int(h.group(4) or 1)
                while (old_left or new_left) and i < len(lines):
                    line = lines[i]
                    i += 1
                    if line.startswith("\\"):  # "\ No newline at end of file"
                        continue
                    tag, text = line[:1], line[1:]
                    if tag == "-":
                        removed.append(text)
                        old_left -= 1
                    elif tag == "+":
                        added.append(text)
                        new_left -= 1
                    else:
                        old_left -= 1
                        new_left -= 1
        return removed, added

    def hunks(self) -> list[Hunk]:
        return [
            Hunk(path, h.group(0), int(h.group(1)), int(h.group(2) or 1))
            for path, block in self._file_diffs()
            for h in _HUNK.finditer(block)
        ]


@dataclass
class Series:
    base: str
    patches: list[Patch]

    @property
    def directory(self) -> Path:
        return PATCHES / f"v{self.base}"

    @property
    def overlay_files(self) -> list[str]:
        return [p for patch in self.patches for p in patch.overlay]

    @property
    def overlay_dir(self) -> Path:
        return overlay_root(self.base)

    def overlay_bytes(self, rel: str) -> bytes:
        return (self.overlay_dir / rel).read_bytes()

    @property
    def touched_files(self) -> list[str]:
        seen: dict[str, None] = {}
        for patch in self.patches:
            for f in patch.files:
                seen.setdefault(f, None)
        return list(seen)


def available_bases() -> list[str]:
    """The bases a series exists for, oldest first (by release, not by string)."""
    found = [
        d.name.removeprefix("v")
        for d in PATCHES.glob("v*")
        if _BASE_DIR.match(d.name) and (d / "series").is_file()
    ]
    return sorted(found, key=release_tuple)


def load(base: str, check_overlay: bool = True) -> Series:
    base = base.removeprefix("v")
    directory = PATCHES / f"v{base}"
    series_file = directory / "series"
    if not series_file.is_file():
        have = ", ".join(available_bases()) or "none"
        raise SeriesError(f"no patch series for vLLM {base} (series exist for: {have})")
    root = overlay_root(base)
    patches: list[Patch] = []
    for lineno, raw in enumerate(series_file.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith("+"):
            if not patches:
                raise SeriesError(f"{series_file}:{lineno}: overlay line before any patch")
            rel = line.lstrip()[1:].strip()
            if not (root / rel).is_file():
                shown = root.relative_to(OVERLAY.parent)
                raise SeriesError(f"{series_file}:{lineno}: {shown}/{rel} does not exist")
            patches[-1].overlay.append(rel)
            continue
        path = directory / line.strip()
        if not path.is_file():
            raise SeriesError(f"{series_file}:{lineno}: {line.strip()} does not exist")
        patches.append(Patch(path, overlay_dir=root))
    series = Series(base, patches)
    if check_overlay:
        _check_overlay_attribution(series, series_file)
    return series


def overlay_files_on_disk(base: str | None = None) -> list[str]:
    """Overlay files under ``base``'s overlay root (default: the shared one)."""
    root = overlay_root(base) if base else OVERLAY
    out = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if not p.is_file() or "__pycache__" in rel.parts or p.suffix == ".pyc":
            continue
        if root == OVERLAY and _BASE_DIR.match(rel.parts[0]):
            continue
        out.append(str(rel))
    return sorted(out)


def _check_overlay_attribution(series: Series, series_file: Path) -> None:
    listed = series.overlay_files
    dupes = sorted({p for p in listed if listed.count(p) > 1})
    if dupes:
        raise SeriesError(f"{series_file}: overlay files listed twice: {', '.join(dupes)}")
    missing = sorted(set(overlay_files_on_disk(series.base)) - set(listed))
    if missing:
        raise SeriesError(
            f"{series_file}: overlay files not attributed to any patch: {', '.join(missing)}"
        )
