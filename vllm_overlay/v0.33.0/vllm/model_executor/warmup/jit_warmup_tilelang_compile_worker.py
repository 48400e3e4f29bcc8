# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A TileLang warmup compiler process (see ``jit_warmup_tilelang_compiler.py``).

Run as a script, so that it imports TileLang but not vLLM: reads one task per
line on stdin, ``{"tir": <PrimFunc as tvm.ir.save_json>, "options": <the
tilelang.compile() options>}``, compiles it into TileLang's disk cache and
answers one JSON line on stdout, ``{"compiled": <whether it compiled, not
found it in the cache>}`` or ``{"error": "..."}``. It exits at the end of its
input.
"""

import json
import logging
import os
import sys
import warnings
from typing import Any


def main() -> None:
    import tilelang
    import tvm
    from tilelang.jit.kernel import JITKernel

    for name in ("tilelang.cache.kernel_cache", "tilelang.jit.kernel"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # TileLang's deprecation warnings would be attributed to this script's
    # wrapper below, i.e. __main__, where Python shows them; the warming
    # process does not.
    warnings.simplefilter("ignore", DeprecationWarning)
    compiled: list[bool] = []
    original_init = JITKernel.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        # A JITKernel built from_database is a disk-cache load (as
        # count_compiles() reads it).
        loaded = args[7] if len(args) > 7 else kwargs.get("from_database", False)
        compiled.append(not loaded)
        original_init(self, *args, **kwargs)

    JITKernel.__init__ = init  # type: ignore[method-assign]
    # Replies go to the original stdout; anything the compilers print goes to
    # stderr instead of into the replies.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for line in sys.stdin:
        task = json.loads(line)
        compiled.clear()
        try:
            tilelang.compile(tvm.ir.load_json(task["tir"]), **task["options"])
            reply: dict[str, Any] = {"compiled": any(compiled)}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    # The script's folder is not a package root: nothing is imported from it.
    sys.path.pop(0)
    main()
