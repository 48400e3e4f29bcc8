"""Where things live in this repository."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATCHES = Path(os.environ.get("DSV4_PATCHES_DIR", REPO / "patches"))
OVERLAY = Path(os.environ.get("DSV4_OVERLAY_DIR", REPO / "vllm_overlay"))
BUILD = Path(os.environ.get("DSV4_BUILD_DIR", REPO / "build"))
CACHE = Path(os.environ.get("DSV4_CACHE_DIR", REPO / ".cache"))
