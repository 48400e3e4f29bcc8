# Thin targets over the scripts/dsv4warmup package. `make` = set up, fetch a
# pristine vLLM 0.34.0 (the newest supported base), apply the series, print the coverage audit.
# fetch/apply/check/revert/status/pr run on $(PYTHON) with the standard library,
# git and patch only (LIGHT); wheel adds `wheel` + `packaging`, installed with pip
# under .cache/tools/wheel. The heavy .venv (torch, triton, ...) is for the audit
# and the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# $(call q,VALUE): VALUE as one shell word (single-quoted), so that a path
# with spaces or quotes (VLLM_DIR="/path with space/vllm") stays one argument.
q = '$(subst ','\'',$(1))'
RUN := PYTHONPATH=$(call q,$(CURDIR)/scripts) $(PY) -m dsv4warmup
LIGHT := PYTHONPATH=$(call q,$(CURDIR)/scripts) $(PYTHON) -m dsv4warmup
WHEEL_TOOLS := .cache/tools/wheel
VLLM_DIR ?=
MODE ?= apply
BASE ?= 0.34.0
TREE_ARG = $(if $(VLLM_DIR),--tree $(call q,$(VLLM_DIR)))

.PHONY: all setup fetch apply check revert status audit audit-sample test test-frozen test-gpu mutants lint devtree regen port fingerprints lab clean

all: setup apply audit

$(VENV)/.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.stamp

fetch:
	$(LIGHT) fetch 0.26.0 0.25.1 0.33.0 0.34.0

apply:
	$(LIGHT) apply $(TREE_ARG) --mode $(call q,$(MODE)) $(if $(BRANCH),--branch $(call q,$(BRANCH)))

check:
	$(LIGHT) check $(TREE_ARG)

revert:
	$(LIGHT) revert $(TREE_ARG)

status:
	$(LIGHT) status $(TREE_ARG)

# SERVE_ARGS="<vllm serve flags>": audit that configuration (resolved by the
# tree's own parser and EngineArgs; a refused one exits 2 with vLLM's message).
# GPU=h100|h200|b200, DEEP_GEMM=on|off, VARIANT=flash|pro (when no --model),
# PATCHED_TREE=<dir> audits that tree as the patched one.
export SERVE_ARGS
GPU ?= h200
DEEP_GEMM ?= on
VARIANT ?= flash
audit: setup
	$(RUN) audit $(if $(JSON),--json-out $(call q,$(JSON))) --base $(call q,$(BASE)) \
	  $(if $(SERVE_ARGS),--serve-args="$$SERVE_ARGS" --gpu $(call q,$(GPU)) \
	  --deep-gemm $(call q,$(DEEP_GEMM)) --model-variant $(call q,$(VARIANT))) \
	  $(if $(PATCHED_TREE),--patched-tree $(call q,$(PATCHED_TREE)))

# A larger property-based sample of the configuration space (N draws per base,
# SEED to reproduce; the CI test draws a few).
N ?= 20
audit-sample: setup
	DSV4_AUDIT_EXAMPLES=$(N) DSV4_AUDIT_DEADLINE_S=$${DSV4_AUDIT_DEADLINE_S:-7200} $(if $(SEED),DSV4_AUDIT_SEED=$(SEED)) \
	  $(PY) -m pytest -q -p no:cacheprovider -s tests/cpu/test_config_space.py -k property

# pytest exits 5 when it collected nothing: that is a failure here. Test files
# are spread over TEST_WORKERS processes, each file whole (its fixtures run once).
# The sdists are fetched first, once: a download that fails is one clear error,
# not every tree-building test erroring at setup.
TEST_WORKERS ?= 2
test: setup fetch
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not gpu and not frozen" tests; rc=$$?; \
	  [ $$rc -ne 5 ] || echo "error: no tests collected" >&2; \
	  [ $$rc -ne 5 ] && exit $$rc || exit 1

# The frozen bases (0.25.1, 0.26.0) keep their apply/revert and audit in
# `make test`; their other coverage tests (key equality with pristine, the
# configuration-space boundaries, 0.25.1's key tests, the 0.26.0 pre-warm entry
# point's sweep and bad-flag refusals) run here.
test-frozen: setup fetch
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "frozen and not gpu" tests

test-gpu: setup
	$(PY) -m pytest -q -m gpu tests/gpu

# Deliberate one-line bugs in patches/ and vllm_overlay/; each must fail a CPU
# test (a table of who killed what). Not in CI: a patched tree per mutant.
# MUTANTS=name,name runs some of them.
mutants: setup
	PYTHONPATH=$(call q,$(CURDIR)/scripts) $(PY) -m dsv4warmup.mutants $(if $(MUTANTS),--only $(call q,$(MUTANTS)))

lint: setup
	$(PY) -m ruff check scripts tests
	$(PY) -m ruff format --check scripts tests

devtree: setup
	$(RUN) devtree $(call q,$(BASE)) $(call q,$(or $(DEST),build/dev/v$(BASE)))

regen: setup
	$(RUN) regen $(call q,$(BASE)) $(call q,$(or $(FROM),build/dev/v$(BASE)))

# FROM_BASE=<a base with a series> BASE=<a known release without one>: replay
# the one onto the other in DEST (default build/dev/v$(BASE)), then regen.
port: setup
	@[ -n $(call q,$(FROM_BASE)) ] || { echo "error: make port needs FROM_BASE=<a base with a series> (and BASE=<the release to port to>)" >&2; exit 2; }
	$(RUN) port $(call q,$(FROM_BASE)) $(call q,$(BASE)) $(call q,$(or $(DEST),build/dev/v$(BASE)))

fingerprints: setup
	$(RUN) fingerprints

clean:
	rm -rf build dist

# Patched wheel from an official one (WHEEL=path, or the official x86_64 wheel
# of BASE, fetched and verified); no CUDA build. Output in dist/.
# Upstream PRs: per PR a `git am` branch + PR body in build/pr/v<base>/ (the
# newest series, or BASE=...), after vLLM's own pre-commit hooks (mypy, typos,
# tools/pre_commit/*.py), the pinned ruff and the dependency / dead-code checks.
# SIGNOFF="Name <email>" (else your git identity) signs the commits off.
BASE_ARG = $(if $(filter command line environment,$(origin BASE)),--base $(call q,$(BASE)))
.PHONY: wheel pr
$(WHEEL_TOOLS)/.stamp: requirements-wheel.txt
	rm -rf $(WHEEL_TOOLS)
	$(PYTHON) -m pip install -q --disable-pip-version-check --target $(WHEEL_TOOLS) -r requirements-wheel.txt
	touch $@

wheel: $(WHEEL_TOOLS)/.stamp
	PYTHONPATH=$(call q,$(CURDIR)/scripts:$(CURDIR)/$(WHEEL_TOOLS)) $(PYTHON) -m dsv4warmup wheel \
	  $(if $(WHEEL),--wheel $(call q,$(WHEEL))) $(BASE_ARG)

pr:
	$(LIGHT) pr $(BASE_ARG) $(if $(OUT),--out $(call q,$(OUT))) $(if $(SIGNOFF),--signoff $(call q,$(SIGNOFF))) \
	  $(if $(SKIP),--skip $(call q,$(SKIP))) $(if $(AI_COAUTHOR),--coauthor $(call q,$(AI_COAUTHOR)))

# GPU lab: pack BASE's pristine + patched trees into .lab/trees and build the package bundle
# (once per kind: .lab/full for the frozen legacy bases 0.25.1/0.26.0, .lab/v033 for the
# registry era, 0.33.0 and later: dsv4warmup.generation.is_registry_era) for
# scripts/lab/gpu-run.sh (BUNDLE=.lab/v033/site.tar.xz there); see docs/gpu-results.md.
LAB_KIND = $(if $(filter 0.25.% 0.26.%,$(BASE)),full,v033)
lab: setup .lab/$(LAB_KIND)/site.tar.xz
	$(RUN) lab --base $(call q,$(BASE)) $(if $(filter v033,$(LAB_KIND)),--pristine-only)
	rm -rf .lab/gpu-lab && cp -r ../shared/gpu-lab .lab/gpu-lab

.lab/%/site.tar.xz: scripts/lab/build-lab-bundle.sh
	mkdir -p .lab/$* && cd .lab/$* && KIND=$* PYTHON=$(call q,$(CURDIR)/$(PY)) bash $(call q,$(CURDIR)/scripts/lab/build-lab-bundle.sh)
