"""Registry-era call-site drivers: vLLM 0.33.0 and later (the JIT warmup registry,
its runners and call sites). Which runners a tree has is read from the tree
(``lifecycle``); which groups audit a release is decided in
:mod:`dsv4warmup.generation`. The frozen 0.25.1 / 0.26.0 drivers are
:mod:`dsv4warmup.legacy`."""
