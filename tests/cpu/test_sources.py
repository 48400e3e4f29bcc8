"""Downloads of pristine sources: a dropped connection is tried again, a wrong
answer is not, and a failed download leaves nothing in the cache; the index is
the one pip is configured with, else pip's own default, never one of ours."""

from __future__ import annotations

import email.message
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import sources
from dsv4warmup.paths import REPO

PAYLOAD = b"not really an sdist\n" * 100
SHA = hashlib.sha256(PAYLOAD).hexdigest()
FILE_URL = "https://files.example/vllm-9.9.9.tar.gz"


class Answer(io.BytesIO):
    """What ``urlopen`` returns: a body, its address, its content type."""

    def __init__(self, body: bytes, url: str = FILE_URL, content_type: str = "") -> None:
        super().__init__(body)
        self.url = url
        self.headers = email.message.Message()
        if content_type:
            self.headers["Content-Type"] = content_type

    def geturl(self) -> str:
        return self.url


class FakeNet:
    """``urlopen`` that fails with ``failures`` (in order) before answering."""

    def __init__(
        self, failures: list[Exception], body: bytes = PAYLOAD, content_type: str = ""
    ) -> None:
        self.failures = list(failures)
        self.body = body
        self.content_type = content_type
        self.calls: list[str] = []

    def __call__(self, req: Any, timeout: float) -> io.BytesIO:
        url = req if isinstance(req, str) else req.full_url
        self.calls.append(url)
        if self.failures:
            raise self.failures.pop(0)
        return Answer(self.body, url, self.content_type)


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[float]:
    """The cache under tmp_path, no real sleeping; returns the delays slept."""
    slept: list[float] = []
    monkeypatch.setattr(sources, "CACHE", tmp_path)
    monkeypatch.setattr(sources.time, "sleep", slept.append)
    monkeypatch.setattr(sources, "_file_url", lambda filename: FILE_URL)
    return slept


def _http_error(code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError(FILE_URL, code, "status", {}, None)  # type: ignore[arg-type]


def test_dropped_connections_are_tried_again(
    net: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeNet(
        [
            urllib.error.URLError("connection reset"),
            TimeoutError("read timed out"),
            _http_error(503),
        ]
    )
    monkeypatch.setattr(sources.urllib.request, "urlopen", fake)
    path = sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist")
    assert path == tmp_path / "sdist" / "vllm-9.9.9.tar.gz"
    assert path.read_bytes() == PAYLOAD
    assert len(fake.calls) == 4
    assert net == [2.0, 4.0, 8.0]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    # cached: no second download
    assert sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist") == path
    assert len(fake.calls) == 4


def test_a_partial_download_is_not_kept_across_tries(
    net: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    class HalfThenDrop(FakeNet):
        def __call__(self, req: Any, timeout: float) -> io.BytesIO:
            self.calls.append(str(req))
            if len(self.calls) == 1:

                class Dropping(io.BytesIO):
                    """More bytes than the file has, then the peer resets."""

                    def read(self, n: int = -1) -> bytes:
                        if self.tell():
                            raise ConnectionResetError("peer reset")
                        self.seek(1)
                        return b"x" * (len(PAYLOAD) + 500)

                return Dropping(self.body)
            return io.BytesIO(self.body)

    fake = HalfThenDrop([])
    monkeypatch.setattr(sources.urllib.request, "urlopen", fake)
    path = sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist")
    assert path.read_bytes() == PAYLOAD  # no stale bytes of the first try
    assert len(fake.calls) == 2


def test_a_network_that_stays_down_fails_clearly_and_leaves_nothing(
    net: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeNet([urllib.error.URLError("no route to host")] * sources.DOWNLOAD_TRIES)
    monkeypatch.setattr(sources.urllib.request, "urlopen", fake)
    with pytest.raises(sources.SourceError) as err:
        sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist")
    msg = str(err.value)
    assert "vllm-9.9.9.tar.gz" in msg and FILE_URL in msg
    assert "no route to host" in msg and f"tried {sources.DOWNLOAD_TRIES} times" in msg
    assert len(fake.calls) == sources.DOWNLOAD_TRIES
    assert list((tmp_path / "sdist").iterdir()) == []


@pytest.mark.parametrize("code", [403, 404])
def test_a_refusal_is_not_tried_again(
    net: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: int
) -> None:
    fake = FakeNet([_http_error(code)])
    monkeypatch.setattr(sources.urllib.request, "urlopen", fake)
    with pytest.raises(sources.SourceError, match=f"HTTP {code}"):
        sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist")
    assert len(fake.calls) == 1 and net == []
    assert list((tmp_path / "sdist").iterdir()) == []


def test_a_wrong_file_is_refused_not_cached(
    net: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sources.urllib.request, "urlopen", FakeNet([], body=b"tampered"))
    with pytest.raises(sources.SourceError, match="sha256 mismatch"):
        sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist")
    assert list((tmp_path / "sdist").iterdir()) == []


JSON = "application/vnd.pypi.simple.v1+json"


def test_the_index_read_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources.time, "sleep", lambda s: None)
    monkeypatch.setattr(sources, "_index_urls", lambda: ["https://index.example/simple"])
    body = json.dumps({"files": [{"filename": "vllm-9.9.9.tar.gz", "url": FILE_URL}]}).encode()
    fake = FakeNet([ConnectionRefusedError("refused")], body=body, content_type=JSON)
    monkeypatch.setattr(sources.urllib.request, "urlopen", fake)
    assert sources._file_url("vllm-9.9.9.tar.gz") == FILE_URL
    assert fake.calls == ["https://index.example/simple/vllm/"] * 2


def test_an_html_index_is_read_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """PEP 503 pages (what many mirrors serve): relative links resolved against
    the page, the hash fragment dropped, the anchor text is the filename."""
    page = b"""<!DOCTYPE html><html><body>
    <a href="../../packages/vllm-9.9.8.tar.gz#sha256=00">vllm-9.9.8.tar.gz</a><br/>
    <a href="../../packages/ab/vllm-9.9.9.tar.gz#sha256=11" data-requires-python="&gt;=3.10">
      vllm-9.9.9.tar.gz</a><br/>
    </body></html>"""
    monkeypatch.setattr(sources, "_index_urls", lambda: ["https://mirror.example/simple"])
    monkeypatch.setattr(sources.urllib.request, "urlopen", FakeNet([], page, "text/html"))
    got = sources._file_url("vllm-9.9.9.tar.gz")
    assert got == "https://mirror.example/packages/ab/vllm-9.9.9.tar.gz"


def test_the_extra_indexes_are_asked_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The index lacks the file, a missing local extra index is skipped at once,
    a local folder index (file://, as pip reads one) has it."""
    local = tmp_path / "simple"
    (local / "vllm").mkdir(parents=True)
    (local / "vllm" / "index.html").write_text(
        '<a href="../../files/vllm-9.9.9.tar.gz">vllm-9.9.9.tar.gz</a>'
    )
    slept: list[float] = []
    monkeypatch.setattr(sources.time, "sleep", slept.append)
    real_urlopen = sources.urllib.request.urlopen
    asked: list[str] = []

    def urlopen(req: Any, timeout: float) -> Any:
        asked.append(req.full_url)
        if req.full_url.startswith("file:"):
            return real_urlopen(req, timeout=timeout)
        return Answer(b'{"files": []}', req.full_url, JSON)

    missing = (tmp_path / "nowhere").as_uri()
    monkeypatch.setattr(sources.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(
        sources, "_index_urls", lambda: ["https://index.example/simple", missing, local.as_uri()]
    )
    assert sources._file_url("vllm-9.9.9.tar.gz") == (tmp_path / "files/vllm-9.9.9.tar.gz").as_uri()
    assert asked == [
        "https://index.example/simple/vllm/",
        f"{missing}/vllm/index.html",
        f"{local.as_uri()}/vllm/index.html",
    ]
    assert slept == []
    with pytest.raises(sources.SourceError) as err:
        sources._file_url("vllm-0.0.1.tar.gz")
    msg = str(err.value)
    assert "vllm-0.0.1.tar.gz is on no package index" in msg
    assert "https://index.example/simple: no such file" in msg and missing in msg


def test_extra_indexes_come_from_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://one.example/simple/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://two.example/simple file:///opt/three/")
    assert sources._index_urls() == [
        "https://one.example/simple",
        "https://two.example/simple",
        "file:///opt/three",
    ]


# --------------------------------------------------------------------------
# Which index: pip's configuration, else pip's own default; no address of our own


def _local_index(tmp_path: Path) -> Path:
    """A PEP 503 folder index (as pip reads a file: index) holding one file."""
    simple = tmp_path / "simple"
    (simple / "vllm").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "vllm-9.9.9.tar.gz").write_bytes(PAYLOAD)
    (simple / "vllm" / "index.html").write_text(
        '<a href="../../files/vllm-9.9.9.tar.gz#sha256=' + SHA + '">vllm-9.9.9.tar.gz</a>'
    )
    return simple


def _no_pip_config(monkeypatch: pytest.MonkeyPatch, config: Path | None = None) -> None:
    """pip reads ``config`` only (os.devnull: no configuration file at all)."""
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config) if config else os.devnull)


@pytest.mark.parametrize("how", ["pip.conf", "PIP_INDEX_URL"])
def test_the_configured_index_is_used(
    how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An index configured for pip (its configuration file, read through
    `pip config`, or PIP_INDEX_URL) is where the file comes from."""
    index = _local_index(tmp_path).as_uri()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {index}/\n")
    _no_pip_config(monkeypatch, conf if how == "pip.conf" else None)
    if how == "PIP_INDEX_URL":
        monkeypatch.setenv("PIP_INDEX_URL", index + "/")
    monkeypatch.setattr(sources, "CACHE", tmp_path / "cache")
    assert sources._index_urls()[0] == index  # a machine-wide pip.conf may add extra ones
    path = sources.cached_release_file("vllm-9.9.9.tar.gz", SHA, "sdist")
    assert path == tmp_path / "cache" / "sdist" / "vllm-9.9.9.tar.gz"
    assert path.read_bytes() == PAYLOAD


def test_without_configuration_pip_default_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """No index configured: the one pip itself says is its default (its
    `--index-url` help), asked without any network."""
    _no_pip_config(monkeypatch)
    helped = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    m = re.search(r"\(default\s+(\S+?)\)", " ".join(helped.split()))
    assert m, helped
    assert sources._index_urls() == [m.group(1).rstrip("/")]


def test_without_pip_and_configuration_the_error_says_to_configure_one(tmp_path: Path) -> None:
    """A Python without pip and no index set: a clear error, no guessed address."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True
    )
    python = tmp_path / "bare" / "bin" / "python"
    probe = (
        "from dsv4warmup import sources\n"
        "try:\n"
        "    print(sources._index_urls())\n"
        "except sources.SourceError as e:\n"
        "    print('error:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    env.update(PYTHONPATH=str(REPO / "scripts"), PIP_CONFIG_FILE=os.devnull)
    res = subprocess.run([str(python), "-c", probe], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("error: no package index to fetch vLLM's sources from"), out
    assert "No module named 'pip'" in out and "PIP_INDEX_URL" in out
    assert "pip config set global.index-url" in out


def test_no_registry_address_in_the_code() -> None:
    """The index comes from pip; scripts/ and tests/ name no registry host."""
    hosts = ("pypi" + ".org", "files" + ".pythonhosted")
    for folder in ("scripts", "tests"):
        for f in (REPO / folder).rglob("*"):
            if f.is_file() and f.suffix in (".py", ".sh", ".txt", ".toml", ".cfg", ".ini"):
                text = f.read_text(errors="replace")
                assert not any(h in text for h in hosts), f
