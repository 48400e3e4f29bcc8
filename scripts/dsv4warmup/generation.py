"""Which generation of call-site drivers serves a vLLM release.

vLLM 0.33.0 moved DeepSeek V4's JIT kernels into a warmup registry
(``JitWarmupRegistry``, ``CompileKey``) and reworked the modules around them:
every release from it on is audited by the registry-era drivers
(``dsv4warmup.registry``, which serve 0.33.0 and 0.34.0). The releases before it
(0.25.1, 0.26.0, frozen) keep the legacy drivers (``dsv4warmup.legacy``).
The decision is made here and nowhere else.
"""

from __future__ import annotations

import re
from pathlib import Path

FIRST_REGISTRY_RELEASE = (0, 33)
# The sampling / verification driver (dsv4warmup.registry.sampling) drives Model
# Runner V2 as 0.34.0 builds it.
FIRST_SAMPLING_AUDIT_RELEASE = (0, 34)
REGISTRY_AUDIT_GROUPS = ("spec_decode", "sparse_mla", "mhc")


def release_tuple(version: str | None) -> tuple[int, ...]:
    """``"0.34.0+local"`` -> ``(0, 34, 0)``; ``()`` for no or an unreadable version."""
    parts = []
    for part in (version or "").split("+")[0].split("."):
        digits = re.match(r"\d+", part)  # "0rc1" -> 0; the release ends there
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() < len(part):
            break
    return tuple(parts)


def is_registry_era(version: str | None) -> bool:
    """Whether ``version`` is served by the registry-era drivers."""
    release = release_tuple(version)
    return bool(release) and release[:2] >= FIRST_REGISTRY_RELEASE


def audit_groups(version: str | None) -> tuple[str, ...]:
    """The registry-era driver groups that audit ``version``."""
    groups = REGISTRY_AUDIT_GROUPS
    if release_tuple(version)[:2] >= FIRST_SAMPLING_AUDIT_RELEASE:
        groups += ("sampling",)
    return groups


def tree_is_registry_era(tree: Path) -> bool:
    """Whether the vLLM tree at ``tree`` is served by the registry-era drivers."""
    from .tree import declared_version

    return is_registry_era(declared_version(tree))
