"""dsv4-warmup tooling: pristine vLLM sources, the patch series, and the key audit."""
