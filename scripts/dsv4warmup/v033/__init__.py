"""Drivers for registry-era vLLM trees, 0.33.0 and 0.34.0 (their JIT registry, runners and
call sites); which runners a tree has is read from the tree (``lifecycle``)."""
