#!/usr/bin/env bash
# Runs on the GPU lab machine (device tool), from the repo root, with .lab/ carried:
#   .lab/gpu-lab/ (the recipe), .lab/bundle/site.tar.xz, .lab/trees/{pristine,patched}.tgz
# made here by `make lab`. Writes logs under $OUT. Usage: gpu-run.sh PHASE...
# Phases: upstream (vLLM's own kernel tests, pristine + patched), gpu (our forked GPU
# tests), sanitizer (c128a memcheck), bench (warmup costs).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

lab() {  # lab NAME: environment of one tree (subshell callers only)
  export TRITON_CACHE_DIR=/tmp/lab-$1/triton-cache TILELANG_CACHE_DIR=/tmp/lab-$1/tilelang-cache
  # shellcheck disable=SC1091
  source "$REPO/.lab/gpu-lab/env.sh" "$REPO/.lab/bundle/site.tar.xz" "$REPO/.lab/trees/$1.tgz" "/tmp/lab-$1" >/dev/null
  export DSV4_VLLM_TREE=/tmp/lab-$1/tree
}

phase_upstream() {
  for t in pristine patched; do
    ( lab $t; cd "$DSV4_VLLM_TREE" && echo "### upstream tests on $t" &&
      timeout 900 python3 -m pytest --noconftest -q -p no:cacheprovider \
        tests/kernels/test_mhc_kernels.py tests/v1/spec_decode/test_eagle_step_kernel.py 2>&1 | tail -25 )
  done
}

phase_gpu() {
  ( lab patched; cd "$REPO" && echo "### our GPU tests (patched tree, forked)" &&
    timeout 1500 python3 -m pytest -m gpu -p no:cacheprovider -v -rA tests/gpu "$@" 2>&1 | tail -120 )
}

phase_sanitizer() {
  ( lab patched; cd "$REPO" &&
    for which in pristine patched; do
      echo "### compute-sanitizer memcheck: c128a garbage input, $which kernel"
      timeout 600 compute-sanitizer --tool memcheck --print-limit 5 \
        python3 scripts/dsv4warmup/gpu/c128a_guard_check.py --kernel "$which" \
          --pristine-tree /tmp/lab-pristine/tree --garbage 2>&1 | tail -15
    done )
}

phase_bench() {
  ( lab patched; cd "$REPO" && echo "### c128a guard overhead" &&
    python3 scripts/dsv4warmup/gpu/c128a_guard_check.py --pristine-tree /tmp/lab-pristine/tree --bench 2>&1 | tail -20 )
}

( lab pristine ) # unpack once
for p in "$@"; do
  "phase_$p" 2>&1 | tee "$OUT/$p.log"
done
