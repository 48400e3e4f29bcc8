#!/usr/bin/env bash
# Runs on the GPU lab machine (device tool), from the repo root, with .lab/ carried:
#   .lab/gpu-lab/ (the recipe), .lab/full/site.tar.xz (scripts/lab/build-lab-bundle.sh),
#   .lab/trees/{pristine,patched}.tgz
# made here by `make lab`. Writes logs under $OUT. Usage: gpu-run.sh PHASE...
# Phases: upstream (vLLM's own kernel tests, pristine + patched), tree_tests (the series' own tree
# tests on pristine and patched code), extensible / c128a_bench (0.34.0's C128A bound and timing),
# tilelang_compile (lscpu +
# scripts/bench/bench_tilelang_compile.py), gpu (our forked GPU
# tests), sanitizer (c128a memcheck), guard_variants (where the c128a guard's cost goes), eagle_step
# (0.33.0 patch 0004's cost), bench (warmup costs), bench_warmup (0.33.0: scripts/bench/bench_warmup.py), bench_node (0.33.0:
# scripts/bench/bench_node_warmup.py),
# compiler_start (0.33.0: a TileLang compiler process's start, alone and 16 at once),
# mhc (mHC warmup vs upstream grid), serving_start (a pre-warm, then serving starts set up by
# vLLM's torch.compile code: scripts/dsv4warmup/gpu/serving_start.py), cpu_bake_serve (serving
# starts on caches baked on a CPU-only machine, .lab/cpu-bake.tar.xz), shared_cache (warmers on one
# TileLang cache folder: scripts/bench/bench_tilelang_shared_cache.py), tilelang_warmup (registry-era trees: the deployment's
# TileLang keys cold and warm per tree, scripts/bench/bench_mhc_registry_warmup.py),
# first_request (scripts/bench/bench_first_request.py, both trees; DEEP_GEMM=no-deep-gemm for the
# mHC keys without DeepGEMM), sanitizer_sweep (memcheck over the
# sparse-MLA warmup + one sweep batch per runtime key; SWEEP_K picks the test). Full logs go to $OUT/<phase>.log
# (no tail: a run killed at the device limit still brings back what it printed);
# PHASE_TIMEOUT caps each phase so a batch fits one call (TIMEOUT_<phase> one phase). BG_PHASES run in the background,
# each on its own copy of the tree (LAB_SUFFIX), capped by BG_TIMEOUT; the pseudo-phase
# wait_bg waits for them (e.g. before a timed phase). WITHOUT=NNNN also makes the patched
# tree less that patch (.lab/trees/without.tgz; add `without` to TREES), and BENCH_TREE=without
# runs the bench phases on it: a baseline on the same machine. PROPOSED=NNNN makes the
# patched tree plus that proposed patch (.lab/trees/proposed.tgz; add `proposed` to TREES).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

lab() {  # lab NAME: environment of one tree (subshell callers only)
  local dest=/tmp/lab-$1${LAB_SUFFIX:+-$LAB_SUFFIX}  # env.sh re-unpacks the tree: one per process
  local bundle=$REPO/${BUNDLE:-.lab/full/site.tar.xz} stamp
  # env.sh keeps a site it finds unpacked: on a machine still warm from a call with another
  # BUNDLE that would be the other TileLang. Unpack again when the bundle differs.
  stamp="$bundle $(stat -c %s "$bundle" 2>/dev/null)"
  [ "$(cat "$dest/site.bundle" 2>/dev/null)" = "$stamp" ] || { rm -rf "$dest/site"; mkdir -p "$dest"; echo "$stamp" > "$dest/site.bundle"; }
  export TRITON_CACHE_DIR=$dest/triton-cache TILELANG_CACHE_DIR=$dest/tilelang-cache
  # shellcheck disable=SC1091
  source "$REPO/.lab/gpu-lab/env.sh" "$bundle" "$REPO/.lab/trees/$1.tgz" "$dest" >/dev/null
  export DSV4_VLLM_TREE=$dest/tree
  # bytecode now (16 cores), not in the first timed process: env.sh re-unpacks the tree
  python3 -m compileall -q -j 0 "$dest/tree/vllm" "$dest/site" >/dev/null 2>&1 || true
}

phase_upstream() {  # UPSTREAM_TREES (default TREES) / UPSTREAM_TESTS select what runs
  for t in ${UPSTREAM_TREES:-${TREES:-pristine patched}}; do
    ( lab $t; cd "$DSV4_VLLM_TREE" && echo "### upstream tests on $t" &&
      timeout ${PHASE_TIMEOUT:-900} python3 -m pytest --noconftest -q -p no:cacheprovider \
        ${UPSTREAM_TESTS:-tests/kernels/test_mhc_kernels.py tests/v1/spec_decode/test_eagle_step_kernel.py} 2>&1 )
  done
}

# The tests the series adds to the vLLM tree, on each tree of TREE_TEST_TREES (default
# "pristine patched"), always in the patched tree's version: a test that fails on pristine
# and passes patched shows its bug. Each
# entry of TREE_TESTS is FILE[::-k EXPR]; vLLM's tests/conftest.py needs more than the lab
# has, so the fixtures come from scripts/dsv4warmup/gpu/tree_test_fixtures.py.
TREE_TESTS_034="tests/kernels/attention/test_flashmla_sparse.py::-k c128a
tests/v1/attention/test_deepseek_v4_swa_visible.py::-k combine_topk_swa_prefill_chunks
tests/kernels/mhc/test_mhc_jit_warmup.py::-k warmup_keys_are_the_runtime_keys
tests/jit_monitor/test_hooks_gpu.py::-k count_jit_compiles
tests/v1/worker/test_gpu_model_runner_v2.py::-k registers_draft_model_jit_warmups
tests/utils_/test_extensible_tensor.py::-k backed_rows
tests/model_executor/test_jit_warmup_triton_launcher.py::-k triton_cache_the_registry_started_with
tests/kernels/mhc/test_mhc_jit_warmup.py::-k builds_a_key_once_per_cache_folder
tests/cuda/test_cuda_context.py::-k pdl_support or has_device_capability"
phase_tree_tests() {
  for t in ${TREE_TEST_TREES:-pristine patched}; do
    ( lab $t; cd "$DSV4_VLLM_TREE" && echo "${TREE_TESTS:-$TREE_TESTS_034}" | while read -r entry; do
        file=${entry%%::*}; sel=${entry#*::}; [ "$sel" = "$entry" ] && sel=""
        echo "### tree test on $t: $file $sel"
        # the series' version of the test against this tree's code (pristine: fails before)
        [ "$t" != patched ] && cp /tmp/lab-patched/tree/"$file" "$file"
        confcut="--noconftest -p dsv4warmup.gpu.tree_test_fixtures"
        [ -f "$(dirname "$file")/conftest.py" ] && confcut="--confcutdir $(dirname "$file") -p dsv4warmup.gpu.tree_test_fixtures"
        # a -k expression is one argument ("-k a or b"), other options split on spaces
        if [ "${sel#-k }" != "$sel" ]; then set -- -k "${sel#-k }"; else set -- $sel; fi
        PYTHONPATH="$REPO/scripts:$PYTHONPATH" timeout -k 5 ${PHASE_TIMEOUT:-300} python3 -m pytest -q -rfE \
          -p no:cacheprovider $confcut "$file" "$@" 2>&1 | tail -n 40
        echo "### $t $file: exit ${PIPESTATUS[0]}"
      done )
  done
}

phase_c128a_bench() {  # the tree's C128A benchmark (the series' script) on each tree of
  # C128A_BENCH_TREES (default "pristine without patched"): launch times and output digests
  for t in ${C128A_BENCH_TREES:-pristine without patched}; do
    ( lab $t; cd "$DSV4_VLLM_TREE" && echo "### C128A benchmark on $t" &&
      cp /tmp/lab-patched/tree/benchmarks/kernels/benchmark_deepseek_v4_c128a_metadata.py /tmp/c128a_bench_$t.py &&
      timeout ${PHASE_TIMEOUT:-300} python3 /tmp/c128a_bench_$t.py ${C128A_BENCH_ARGS:-} 2>&1 | grep -v "^(MainProcess\|^INFO\|^WARNING" )
  done
}

phase_extensible() {  # the C128A bound under an extensible KV cache: memcheck, growth
  ( lab patched; cd "$REPO" && timeout ${PHASE_TIMEOUT:-600} python3 \
      scripts/dsv4warmup/gpu/c128a_extensible_check.py --pristine-tree /tmp/lab-pristine/tree 2>&1 )
}

phase_gpu() {
  ( lab patched; cd "$REPO" && echo "### our GPU tests (patched tree, forked)" &&
    timeout ${PHASE_TIMEOUT:-1500} python3 -m pytest -m gpu -p no:cacheprovider -q -rA ${GPU_TESTS:-tests/gpu} 2>&1 )
}

phase_gpu_each() {  # each file of GPU_TESTS in its own pytest, capped by PHASE_TIMEOUT (one
  # hung or slow file cannot take the others' time)
  ( lab patched; cd "$REPO" && for f in ${GPU_TESTS:-tests/gpu/test_v033_*_gpu.py}; do
      echo "### $f (patched tree, forked)"
      timeout -k 5 ${PHASE_TIMEOUT:-300} python3 -m pytest -m gpu -p no:cacheprovider -q -rfEs --durations=6 "$f" 2>&1
      echo "### $f: exit $?"
    done )
}

phase_sanitizer() {  # memcheck on garbage input (pristine vs patched) + guard overhead;
  # C128A_MODE=bench C128A_ROUNDS=N: the overhead alone, N processes
  ( lab patched; cd "$REPO" && for round in $(seq "${C128A_ROUNDS:-1}"); do
      echo "### c128a_guard_check --mode ${C128A_MODE:-all}, round $round"
      timeout ${PHASE_TIMEOUT:-900} python3 scripts/dsv4warmup/gpu/c128a_guard_check.py \
        --pristine-tree /tmp/lab-pristine/tree --mode "${C128A_MODE:-all}" ${C128A_ARGS:-} 2>&1 || exit
    done )
}

phase_guard_variants() {  # where the C128A guard's cost goes: the patched kernel less one part
  # of the guard at a time, each against pristine at width 512 (TREES="pristine patched");
  # VARIANT_ARGS e.g. "--only readable-limit,no-guard --rounds 3"
  ( lab patched; cd "$REPO" && PYTHONPATH="$REPO/scripts${PYTHONPATH:+:$PYTHONPATH}" \
      timeout ${PHASE_TIMEOUT:-300} python3 scripts/dsv4warmup/gpu/c128a_guard_variants.py \
      --pristine-tree /tmp/lab-pristine/tree ${VARIANT_ARGS:-} 2>&1 )
}

phase_eagle_step() {  # 0.33.0 patch 0004's cost: the EAGLE step kernel without its scalar
  # specializations against pristine's, CUDA graph, ABBA (TREES="pristine patched"); EAGLE_ARGS
  # e.g. "--rounds 5"
  ( lab patched; cd "$REPO" && timeout ${PHASE_TIMEOUT:-300} python3 \
      scripts/bench/bench_eagle_step_specialization.py --pristine-tree /tmp/lab-pristine/tree ${EAGLE_ARGS:-} 2>&1 )
}

# Host backtraces off: with compute-sanitizer's default --show-backtrace yes (2025.3.1) every
# kernel launch's Python frame -- and through f_back its callers' locals -- stayed referenced
# from outside Python, so each step's tensors were never freed and the sweep ran the H200 out
# of memory (scripts/dsv4warmup/gpu/sweep_memory.py: 654 retained frames after 30 batches,
# 0 with 'device'). Errors are still reported, with the kernel, address and device frames.
SANITIZER_OPTS=${SANITIZER_OPTS---show-backtrace device}

phase_sanitizer_sweep() {  # memcheck over the sparse-MLA warmup + every runtime key (#4)
  ( lab patched; cd "$REPO" && echo "### compute-sanitizer over warmup + sweep" &&
    # No --target-processes all and serial compiles: with both, the sanitizer segfaulted
    # (H200, 2026-12-02) and its orphaned target kept the log pipe open. Caching allocator on:
    # without it the sweep's per-step cudaMalloc/cudaFree ran memcheck out of device memory.
    VLLM_TRITON_JIT_WARMUP_NUM_THREADS=1 \
      timeout -k 10 ${PHASE_TIMEOUT:-900} \
      compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 3 $SANITIZER_OPTS \
      python3 -m pytest -p no:cacheprovider -p no:forked -m gpu -q -s \
        tests/gpu/test_sparse_mla_gpu.py -k "${SWEEP_K:-every_runtime_key_once and flash-64k}" 2>&1 )
}

phase_sweep_memory() {  # where memory goes under memcheck (scripts/dsv4warmup/gpu/sweep_memory.py)
  # SWEEP_MEMORY_SANITIZER=0 runs the same without the sanitizer, for comparison.
  local wrap="compute-sanitizer --tool memcheck --print-limit 20 $SANITIZER_OPTS"
  [ "${SWEEP_MEMORY_SANITIZER:-1}" = 0 ] && wrap=""
  ( lab patched; cd "$REPO" && echo "### sweep memory, under: ${wrap:-no sanitizer}" &&
    VLLM_TRITON_JIT_WARMUP_NUM_THREADS=1 \
      timeout -k 10 ${PHASE_TIMEOUT:-900} \
      $wrap python3 scripts/dsv4warmup/gpu/sweep_memory.py \
        ${SWEEP_MEMORY_ARGS:---max-model-len 4096 --warmup --no-sync --every 10 --memory-fraction 0.3} 2>&1 )
}

phase_bench() {  # warmup costs, cold and warm disk caches
  ( lab patched; cd "$REPO" && echo "### Triton warmups" &&
    timeout ${PHASE_TIMEOUT:-600} python3 scripts/dsv4warmup/gpu/triton_warmup_bench.py 2>&1 )
}

phase_bench_warmup() {  # scripts/bench/bench_warmup.py: per-family warmup cost, cold and warm (#18); BENCH_TREE picks the tree
  ( lab ${BENCH_TREE:-patched}; cd "$REPO" && echo "### bench_warmup ${BENCH_ARGS:-}" &&
    timeout ${PHASE_TIMEOUT:-900} python3 scripts/bench/bench_warmup.py --tree "$DSV4_VLLM_TREE" \
      ${BENCH_ARGS:-} --json "$OUT/bench_warmup.json" 2>&1 )
}

phase_tilelang_compile() {  # the host's CPUs, then one mHC TileLang key's compile alone (#18)
  ( lab patched; cd "$REPO" && lscpu && echo "### one TileLang compile" &&
    timeout ${PHASE_TIMEOUT:-120} python3 scripts/bench/bench_tilelang_compile.py 2>&1 )
}

phase_compiler_start() {  # what a TileLang compiler process's start costs (0.33.0 patch 0011's
  # compile worker on an empty input: imports TileLang, exits), alone and 16 at once (#18)
  ( lab patched; cd "$REPO" && echo "### compiler process start" &&
    CUDA_VISIBLE_DEVICES= timeout ${PHASE_TIMEOUT:-120} python3 - \
      "$DSV4_VLLM_TREE/vllm/model_executor/warmup/jit_warmup_tilelang_compile_worker.py" <<'PY' 2>&1
import subprocess, sys, time
for n in (1, 1, 16, 16):
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, sys.argv[1]], stdin=subprocess.DEVNULL) for _ in range(n)]
    codes = [p.wait() for p in procs]
    print(f"{n} compiler process(es) at once: {time.perf_counter() - start:.2f} s, exit codes {set(codes)}")
PY
  )
}

tlpatch_site() {  # /tmp/site-tlpatch: the patched tree's site with the TileLang change
  # TL_SITE_PATCH applied (inside `lab patched`); hard links, but a fresh copy of each file
  # the change edits (patch would write through)
  rm -rf /tmp/site-tlpatch && cp -al /tmp/lab-patched/site /tmp/site-tlpatch &&
  for f in $(sed -n 's|^+++ b/\(tilelang/.*\)|\1|p' "$TL_SITE_PATCH"); do
    cp --remove-destination /tmp/lab-patched/site/$f /tmp/site-tlpatch/$f; done &&
  patch -p1 -s -d /tmp/site-tlpatch < "$TL_SITE_PATCH" && rm -rf /tmp/site-tlpatch/testing &&
  echo "### tlpatch: TileLang with $(basename "$TL_SITE_PATCH")"
}

phase_tilelang_warmup() {  # scripts/bench/bench_mhc_registry_warmup.py: cold and warm registry
  # warmup of the deployment's TileLang keys on each lab tree of TL_TREES (default "without
  # patched", e.g. WITHOUT=0011); TL_RUNS the order, TL_ARGS e.g. --deep-gemm-keys.
  # TL_SITE_PATCH=patches/tilelang/vX/NNNN-*.patch adds the run name "tlpatch": the patched
  # tree on the bundle's TileLang with that change applied, on the patched tree's cache folder
  ( lab patched; cd "$REPO" && echo "### TileLang registry warmup ${TL_ARGS:-}" &&
    site_args=() && if [ -n "${TL_SITE_PATCH:-}" ]; then
      tlpatch_site &&
      site_args=(--tree tlpatch=/tmp/lab-patched/tree --site tlpatch=/tmp/site-tlpatch --cache-of tlpatch=patched)
    fi &&
    timeout ${PHASE_TIMEOUT:-600} python3 scripts/bench/bench_mhc_registry_warmup.py \
      $(for t in ${TL_TREES:-without patched}; do echo --tree $t=/tmp/lab-$t/tree; done) "${site_args[@]}" \
      --runs "${TL_RUNS:-without:cold,patched:cold,patched:warm,without:warm,without:warm,patched:warm}" \
      ${TL_ARGS:-} --json "$OUT/tilelang_warmup.json" 2>&1 )
}

phase_serving_start() {  # scripts/dsv4warmup/gpu/serving_start.py: a pre-warm, then serving starts
  # set up by vLLM's torch.compile code, no cache variables, per tree of SS_TREES (default
  # "pristine patched"); SS_ARGS_<tree> e.g. --tilelang
  for t in ${SS_TREES:-pristine patched}; do
    ( lab $t; cd "$REPO" && echo "### serving starts on $t" && args_var=SS_ARGS_$t &&
      PYTHONPATH="$REPO/scripts:$PYTHONPATH" timeout ${PHASE_TIMEOUT:-900} \
        python3 -m dsv4warmup.gpu.serving_start ${!args_var:-} 2>&1 )
  done
}

serve_on_bake() {  # serve_on_bake SITE_PREFIX ARGS...: serving_start on the unpacked bake, with
  # SITE_PREFIX ("DIR:" or "") first on PYTHONPATH (inside `lab patched`)
  local site=$1; shift
  PYTHONPATH="$REPO/scripts:$site$PYTHONPATH" timeout ${PHASE_TIMEOUT:-900} \
    python3 -m dsv4warmup.gpu.serving_start --tilelang ${CBS_ARGS:-} --home /tmp/bakehome "$@" 2>&1
}

phase_cpu_bake_serve() {  # serving starts (patched tree) on caches baked on this repo's CPU-only
  # machine by dsv4warmup.registry.cpu_bake (.lab/cpu-bake.tar.xz, unpacked at the HOME it was baked in);
  # TL_SITE_PATCH adds alternating starts on the bundle's and the changed TileLang; CBS_ARGS e.g.
  # --deep-gemm-keys (bake with the same)
  local first=${CBS_FIRST-serve-inductor,serve-aot}  # the starts that log their keys (empty: none)
  rm -rf /tmp/bakehome && mkdir -p /tmp/bakehome && tar xJf .lab/cpu-bake.tar.xz -C /tmp/bakehome &&
  # each start logs its cache keys' parts (compare with the bake's log: dsv4warmup.registry.cache_keys)
  ( lab patched; cd "$REPO" && echo "### serving starts on caches baked on a CPU-only machine" &&
    python3 -c 'import hashlib, sys; from triton.runtime.cache import triton_key
print(sys.version.split()[0], "triton_key sha256", hashlib.sha256(triton_key().encode()).hexdigest())' &&
    { [ -z "$first" ] || serve_on_bake "" --starts "$first" --key-log "$OUT/cpu_bake_serve_keys"; } &&
    # TL_SITE_PATCH: then CBS_ROUNDS pairs of starts, the bundle's TileLang and the changed one
    if [ -n "${TL_SITE_PATCH:-}" ]; then
      tlpatch_site && for _ in $(seq ${CBS_ROUNDS:-3}); do
        echo "### serving start on the bake, TileLang bundled"
        serve_on_bake "" --starts serve-inductor || exit 1
        echo "### serving start on the bake, TileLang changed"
        serve_on_bake /tmp/site-tlpatch: --starts serve-inductor || exit 1
      done
    fi )
}

phase_shared_cache() {  # scripts/bench/bench_tilelang_shared_cache.py: SC_WARMERS warmers on one
  # TileLang cache folder at once, per tree of SC_TREES (default "without patched", WITHOUT=0014:
  # no per-key lock vs the lock), then on the patched tree with the lock holder killed mid-compile
  for t in ${SC_TREES:-without patched}; do
    ( lab $t; cd "$REPO" && echo "### shared TileLang cache on $t" &&
      timeout ${PHASE_TIMEOUT:-600} python3 scripts/bench/bench_tilelang_shared_cache.py \
        --warmers ${SC_WARMERS:-4} --keys ${SC_KEYS:-3} --kill-after 0 2>&1 )
  done
  ( lab patched; cd "$REPO" && echo "### shared TileLang cache on patched, lock holder killed" &&
    timeout ${PHASE_TIMEOUT:-600} python3 scripts/bench/bench_tilelang_shared_cache.py \
      --warmers ${SC_WARMERS:-4} --keys ${SC_KEYS:-3} --kill-holder --kill-after ${SC_KILL_AFTER:-4} 2>&1 )
}

phase_bench_node() {  # scripts/bench/bench_node_warmup.py: a node's TP ranks warming at once, alone vs shared (#18)
  ( lab ${BENCH_TREE:-patched}; cd "$REPO" && echo "### bench_node_warmup ${BENCH_ARGS:-}" &&
    timeout ${PHASE_TIMEOUT:-900} python3 scripts/bench/bench_node_warmup.py --tree "$DSV4_VLLM_TREE" \
      ${BENCH_ARGS:-} --json "$OUT/bench_node_warmup.json" 2>&1 )
}

phase_mhc() {
  ( lab patched; cd "$REPO" && echo "### mHC warmup vs upstream grid" &&
    timeout ${PHASE_TIMEOUT:-1200} python3 scripts/dsv4warmup/gpu/mhc_warmup_bench.py --json "$OUT/mhc_bench.json" 2>&1 )
}

phase_first_request() {  # first-request replay, patched then pristine (#6)
  ( lab patched; cd "$REPO" && echo "### first-request replay" &&
    VLLM_TRITON_JIT_WARMUP_NUM_THREADS=${THREADS:-8} timeout ${PHASE_TIMEOUT:-900} \
      python3 scripts/bench/bench_first_request.py --max-tokens ${MAX_TOKENS:-8192} --runs ${RUNS:-cold,warm,prewarm} \
        --${DEEP_GEMM:-deep-gemm} \
        $(for t in ${BENCH_TREES:-patched pristine}; do echo --tree $t=/tmp/lab-$t/tree; done) \
        --json "$OUT/first_request.json" 2>&1 )
}

lab_base() {  # the vLLM version of .lab/trees/pristine.tgz
  tar xzf .lab/trees/pristine.tgz -O PKG-INFO | sed -n 's/^Version: //p' | head -1
}
make_patched() {  # 0.33.0 trees are large: the patched one is made here from pristine + series
  [ -f .lab/trees/patched.tgz ] && return 0
  local base d=/tmp/lab-build-patched
  base=$(lab_base)
  [ -f "patches/v$base/series" ] || { echo "no series for $base: pristine only"; return 0; }
  rm -rf $d && mkdir -p $d && tar xzf .lab/trees/pristine.tgz -C $d &&
    PYTHONPATH=scripts python3 -m dsv4warmup apply --tree $d &&
    tar czf .lab/trees/patched.tgz -C $d .
}
overlay_of() {  # overlay_of BASE PATCH: the vLLM-tree files the series adds with PATCH
  awk -v p="$(basename "$2")" '$1 ~ /^[0-9]/ {on = ($1 == p)} on && $1 == "+" {print $2}' "patches/v$1/series"
}
make_without() {  # WITHOUT=NNNN: the patched tree less that patch of the series, as .lab/trees/without.tgz;
  # a later patch that needs it goes too (later hunks are reversed, then re-applied where they apply)
  [ -n "${WITHOUT:-}" ] || return 0
  local d=/tmp/lab-build-without base p q later
  base=$(lab_base)
  p=$(ls patches/v$base/$WITHOUT-*.patch) || return 1
  later=$(ls patches/v$base/[0-9]*.patch | awk -v p="$p" '$0 > p')
  rm -rf $d && mkdir -p $d && tar xzf .lab/trees/patched.tgz -C $d || return 1
  for q in $(echo "$later" | sort -r) "$p"; do patch -R -p1 -s -d $d < "$q" || return 1; done
  overlay_of "$base" "$p" | (cd $d && xargs -r rm -v)
  for q in $later; do
    if patch -p1 -s --dry-run -d $d < "$q" >/dev/null 2>&1; then
      patch -p1 -s -d $d < "$q"
    else
      echo "without $WITHOUT: also without $(basename "$q") (it needs $WITHOUT)"
      overlay_of "$base" "$q" | (cd $d && xargs -r rm -v)
    fi
  done
  tar czf .lab/trees/without.tgz -C $d .
}
make_proposed() {  # PROPOSED=NNNN: the patched tree plus patches/proposed/v<base>/NNNN-*.patch (written,
  # not in the series) as .lab/trees/proposed.tgz: add `proposed` to TREES / TL_TREES
  [ -n "${PROPOSED:-}" ] || return 0
  local d=/tmp/lab-build-proposed base p
  base=$(lab_base)
  p=$(ls patches/proposed/v$base/$PROPOSED-*.patch) || return 1
  rm -rf $d && mkdir -p $d && tar xzf .lab/trees/patched.tgz -C $d &&
    patch -p1 -s -d $d < "$p" && tar czf .lab/trees/proposed.tgz -C $d .
}
make_patched
make_without
make_proposed
for t in ${TREES:-pristine patched}; do ( lab "$t" ); done  # unpack once
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
for p in ${BG_PHASES:-}; do
  ( export LAB_SUFFIX=$p PHASE_TIMEOUT=${BG_TIMEOUT:-${PHASE_TIMEOUT:-900}}
    "phase_$p" > "$OUT/$p.log" 2>&1 ) &
done
for p in "$@"; do
  if [ "$p" = wait_bg ]; then wait; echo "### background phases done"; continue; fi  # not in a pipe: a subshell can't wait
  tvar=TIMEOUT_$p  # TIMEOUT_<phase> caps that phase instead of PHASE_TIMEOUT
  ( [ -n "${!tvar:-}" ] && export PHASE_TIMEOUT=${!tvar}; "phase_$p" ) 2>&1 | tee "$OUT/$p.log"
done
wait
