"""Pristine vLLM sources: the PyPI sdist of a supported base, sha256-verified.

The sdist carries the full ``vllm/`` and ``tests/`` trees. It is fetched from the
first simple index pip would use that lists it (JSON, PEP 691, or HTML, PEP 503):
the index pip is configured with, or pip's own default, then its extra indexes.
No address is written here. It is verified against the hashes below, and cached.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .paths import CACHE

# sdist sha256 of every release this project knows. A series exists for the
# ones in patches/ (0.34.0 is the newest, the default).
SDIST_SHA256: dict[str, str] = {
    "0.25.1": "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4",
    "0.26.0": "23e9fa19d7e20ce7dcc1c074d41503e2116d23f19e688f5d5ea91b741f958502",
    "0.33.0": "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
    "0.34.0": "fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113",
}
DEFAULT_BASE = "0.34.0"
# Kept for operators who pin them: no new work; CI keeps their apply/revert and
# audit (the rest of their tests: `make test-frozen`).
FROZEN_BASES = ("0.26.0", "0.25.1")


class SourceError(RuntimeError):
    pass


# A CI host's network drops a request now and then; every test that needs a tree
# erroring for one dropped connection is worse than waiting a few seconds.
DOWNLOAD_TRIES = 4
RETRY_DELAY_S = 2.0


T = TypeVar("T")


def _with_retries(what: str, attempt: Callable[[], T], tries: int = DOWNLOAD_TRIES) -> T:
    """``attempt()``, tried again after a network error (connection, timeout, a
    5xx or 429 answer) with doubling delays; any other error at once."""
    delay = RETRY_DELAY_S
    for n in range(1, tries + 1):
        try:
            return attempt()
        except urllib.error.HTTPError as e:
            if e.code < 500 and e.code != 429:
                raise SourceError(f"{what}: HTTP {e.code} {e.reason}") from e
            err: Exception = e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            err = e
        if n == tries:
            raise SourceError(f"{what}: {err} (tried {n} times)") from err
        print(f"{what}: {err}; trying again in {delay:.0f} s", file=sys.stderr)
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def check_known(version: str) -> str:
    version = version.removeprefix("v")
    if version not in SDIST_SHA256:
        known = ", ".join(sorted(SDIST_SHA256))
        raise SourceError(f"vLLM {version} is not a known base; known releases: {known}")
    return version


def _pip_config(key: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", key], capture_output=True, text=True
    )
    return res.stdout.strip() if res.returncode == 0 else ""


# pip's own default index, printed by pip itself: importing pip's internals
# here would pull the stdlib distutils into the test process.
_PIP_DEFAULT_INDEX = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"


def _pip_default_index() -> str:
    """The index pip uses when none is configured, asked from pip."""
    res = subprocess.run([sys.executable, "-c", _PIP_DEFAULT_INDEX], capture_output=True, text=True)
    url = res.stdout.strip() if res.returncode == 0 else ""
    if not url:
        why = (res.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SourceError(
            "no package index to fetch vLLM's sources from: PIP_INDEX_URL is not set, pip "
            f"has no global.index-url, and pip cannot be asked for its default "
            f"({sys.executable}: {why}); configure an index: "
            "`export PIP_INDEX_URL=<simple index URL>` or "
            "`pip config set global.index-url <simple index URL>`"
        )
    return url


def _index_url() -> str:
    """The simple index pip itself would use: PIP_INDEX_URL, else pip's
    configured global.index-url, else pip's own default."""
    url = os.environ.get("PIP_INDEX_URL") or _pip_config("global.index-url")
    return (url or _pip_default_index()).rstrip("/")


def _index_urls() -> list[str]:
    """The simple indexes pip would look in: its index, then the extra ones."""
    extra = os.environ.get("PIP_EXTRA_INDEX_URL") or _pip_config("global.extra-index-url")
    return [_index_url(), *(u.rstrip("/") for u in extra.split())]


class _Links(html.parser.HTMLParser):
    """The file links of a PEP 503 project page: anchor text -> href."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links["".join(self._text).strip()] = self._href
            self._href = None


def _project_files(index: str) -> dict[str, str]:
    """Filename -> download address of every vLLM file on one simple index,
    from its JSON answer (PEP 691) or its HTML page (PEP 503)."""
    url = f"{index}/vllm/"
    local = url.startswith("file:")
    if local:  # a folder tree on disk: each project page is an index.html
        url += "index.html"
    req = urllib.request.Request(
        url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )

    def read_page() -> tuple[str, str, bytes]:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.geturl(), resp.headers.get_content_type(), resp.read()

    # a missing local page stays missing: no point waiting to read it again
    where, content_type, body = _with_retries(
        f"reading the package index {url}", read_page, tries=1 if local else DOWNLOAD_TRIES
    )
    if content_type.endswith("json"):
        files = {e["filename"]: e["url"] for e in json.loads(body).get("files", [])}
    else:
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        files = parser.links
    return {
        name: urllib.parse.urldefrag(urllib.parse.urljoin(where, href)).url
        for name, href in files.items()
    }


def _file_url(filename: str) -> str:
    """Download address of one vLLM release file, from the first simple index
    pip uses that has it."""
    problems = []
    for index in _index_urls():
        try:
            files = _project_files(index)
        except (SourceError, ValueError, KeyError) as e:
            problems.append(f"{index}: {e}")
            continue
        if filename in files:
            return files[filename]
        problems.append(f"{index}: no such file")
    raise SourceError(f"{filename} is on no package index pip uses ({'; '.join(problems)})")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached_release_file(filename: str, expected_sha256: str, folder: str) -> Path:
    """``CACHE/<folder>/<filename>``, downloaded once and sha256-verified."""
    path = CACHE / folder / filename
    if path.exists() and _sha256(path) == expected_sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    url = _file_url(filename)
    print(f"fetching {filename}", file=sys.stderr)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{filename}.", delete=False) as tmp:

        def download() -> None:
            tmp.seek(0)
            tmp.truncate()
            with urllib.request.urlopen(url, timeout=600) as resp:
                shutil.copyfileobj(resp, tmp)

        try:
            _with_retries(f"downloading {filename} from {url}", download)
        except BaseException:
            os.unlink(tmp.name)
            raise
    got = _sha256(Path(tmp.name))
    if got != expected_sha256:
        os.unlink(tmp.name)
        raise SourceError(f"{filename} sha256 mismatch: expected {expected_sha256}, got {got}")
    os.replace(tmp.name, path)
    return path


def sdist(version: str) -> Path:
    """Path to the verified sdist of ``version``, downloading it once."""
    version = check_known(version)
    return cached_release_file(f"vllm-{version}.tar.gz", SDIST_SHA256[version], "sdist")


def extract(version: str, dest: Path) -> Path:
    """A fresh pristine tree of ``version`` at ``dest`` (replaced if present)."""
    archive = sdist(version)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".extract-"))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(tmp.iterdir())
        top.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def read_members(version: str, relpaths: list[str]) -> dict[str, bytes | None]:
    """Files of the pristine sdist (None where it has no such file), read in
    one pass over the archive."""
    prefix = f"vllm-{version}/"
    wanted = set(relpaths)
    out: dict[str, bytes | None] = dict.fromkeys(relpaths)
    with tarfile.open(sdist(version)) as tar:
        for member in tar:
            rel = member.name.removeprefix(prefix)
            if rel in wanted and member.isfile():
                f = tar.extractfile(member)
                out[rel] = f.read() if f else None
    return out
