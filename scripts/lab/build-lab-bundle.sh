#!/usr/bin/env bash
# Bundles of the pure packages vLLM imports on the GPU lab machine (which has CPython 3.12, torch
# 2.11.0, triton 3.6.0, transformers, numpy; see ../shared/gpu-lab), unpacked and xz-compressed to
# fit the device tool's 64 MiB carry limit beside the trees (`make lab`, ~5.8 MB each).
#   KIND=full (default, ~49 MB): tilelang 0.1.9 and its native dependencies (the gpu-lab bundle's
#     pins) plus llguidance and xgrammar, which the spec-decode proposer imports: mHC tests, the
#     pre-warm entry point and scripts/bench/bench_first_request.py in one call.
#   KIND=triton (~47 MB): no tilelang, a wider set of pure packages; what the Triton-side GPU tests
#     (spec decode, sparse MLA) were first verified with.
#   KIND=v033-tilelang-0.1.15: the same with TileLang 0.1.15 (parallel compiles save to its disk
#     cache outside its global lock), to measure a TileLang pin bump against 0.1.12; the pin of
#     the 0.34.0 series (built into .lab/v034-tilelang-0.1.15/, ~47 MB).
#   KIND=v033: vLLM 0.33.0's pins (tilelang 0.1.12, apache-tvm-ffi 0.1.11) and the pure packages
#     0.33.0 adds on the way to its kernel modules (fastapi, starlette, partial-json-parser); the
#     lab keeps its torch 2.11 / triton 3.6 (0.33.0 pins torch 2.14 / triton 3.8).
# Usage (repo root): mkdir -p .lab/full && (cd .lab/full && bash ../../scripts/lab/build-lab-bundle.sh)
#   -> .lab/full/site.tar.xz, the default BUNDLE of scripts/lab/gpu-run.sh.
set -euo pipefail
out=$(pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
pins=(
  cloudpickle==3.1.3 uvloop==0.23.0 py-cpuinfo==9.0.0 prometheus_client==0.26.0 llguidance==1.7.6
  xgrammar==0.2.6 apache-tvm-ffi==0.1.10
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  openai==2.54.0 openai-harmony==0.0.8 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1
  cbor2==6.3.0 pyzmq==27.3.0 msgspec==0.23.0 pybase64==1.5.1 cachetools==8.0.2
  pytest-forked==1.7.5 py==1.11.0
  transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 huggingface_hub==2.4.0 hf-xet==1.8.0
  regex==2026.11.19 PyYAML==6.0.4 pillow==13.0.0 tqdm==4.70.1 packaging==26.4 psutil==7.2.2
  aiohttp==3.14.5 multidict==7.2.1 yarl==1.25.1 propcache==0.5.4 frozenlist==1.8.0 aiosignal==1.4.0
  aiohappyeyeballs==2.7.1 attrs==26.1.0
  requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 charset-normalizer==3.5.3
  rich==15.0.0 Pygments==2.21.0 markdown-it-py==4.3.0 mdurl==0.1.2 click==8.5.1 typer==0.29.2 shellingham==1.5.4
  anyio==4.16.0 h11==0.16.0 httpx==0.28.1 httpcore==1.0.9 httpx2==2.16.2 httpcore2==2.16.2
  einops==0.8.2 truststore==0.10.5 numpy==2.4.6
)
if [ "${KIND:-full}" = full ]; then
  pins=(
    tilelang==0.1.9 apache-tvm-ffi==0.1.10 z3-solver==4.15.4.0 torch-c-dlpack-ext==0.1.5
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    openai==2.54.0 openai-harmony==0.0.8 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1
    cbor2==6.3.0 pyzmq==27.3.0 msgspec==0.23.0 pybase64==1.5.1 cachetools==8.0.2
    pytest-forked==1.7.5 py==1.11.0 llguidance==1.7.6 xgrammar==0.2.6
  )
fi
if [ "${KIND:-full}" = v033 ] || [ "${KIND:-full}" = v033-tilelang-0.1.15 ]; then
  tilelang_pin=tilelang==0.1.12
  [ "$KIND" = v033-tilelang-0.1.15 ] && tilelang_pin=tilelang==0.1.15
  pins=(
    "$tilelang_pin" apache-tvm-ffi==0.1.11 z3-solver==4.15.4.0 torch-c-dlpack-ext==0.1.5
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    openai==2.54.0 openai-harmony==0.0.8 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1
    cbor2==6.3.0 pyzmq==27.3.0 msgspec==0.23.0 pybase64==1.5.1 cachetools==8.0.2
    pytest-forked==1.7.5 py==1.11.0 llguidance==1.7.6 xgrammar==0.2.6
    fastapi==0.165.0 starlette==1.10.0 partial-json-parser==0.2.1.1.post7 annotated-doc==0.0.7
    opentelemetry-api==1.45.2
  )
fi
plat=()
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  plat+=(--platform "$p")
done
${PYTHON:-python3} -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" -d "$work/whl" "${pins[@]}"
${PYTHON:-python3} -m pip install -q --no-deps --no-compile --target "$work/site" --python-version 3.12 \
  --implementation cp --only-binary=:all: "${plat[@]}" "$work"/whl/*.whl
# ROCm's headers: the lab is CUDA, and without them two bundles fit one carry. z3's command-line
# tool (TileLang uses the library under z3/lib): without it a 0.1.15 bundle fits beside the trees
# and a CPU bake (6.9 MB compressed).
rm -rf "$work/site/tilelang/3rdparty/composable_kernel" "$work/site/bin/z3"
(cd "$work/site" && tar cf - . | xz -9e -T0 > "$out/site.tar.xz")
ls -la "$out/site.tar.xz"
