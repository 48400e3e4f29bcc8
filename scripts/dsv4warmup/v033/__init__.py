"""Drivers for vLLM 0.33.0 trees (its JIT registry, runners and call sites)."""
