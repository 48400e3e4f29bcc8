# Thin targets over the scripts/dsv4warmup package. `make` = set up, fetch a
# pristine vLLM 0.26.0, apply the series, print the coverage audit.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN := PYTHONPATH=$(CURDIR)/scripts $(PY) -m dsv4warmup
VLLM_DIR ?=
MODE ?= apply
BASE ?= 0.26.0
TREE_ARG := $(if $(VLLM_DIR),--tree $(VLLM_DIR))

.PHONY: all setup fetch apply check revert status audit test test-gpu mutants lint devtree regen port fingerprints lab clean

all: setup apply audit

$(VENV)/.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.stamp

fetch: setup
	$(RUN) fetch 0.26.0 0.25.1 0.33.0

apply: setup
	$(RUN) apply $(TREE_ARG) --mode $(MODE) $(if $(BRANCH),--branch $(BRANCH))

check: setup
	$(RUN) check $(TREE_ARG)

revert: setup
	$(RUN) revert $(TREE_ARG)

status: setup
	$(RUN) status $(TREE_ARG)

audit: setup
	$(RUN) audit $(if $(JSON),--json-out $(JSON))

# pytest exits 5 when it collected nothing: that is a failure here.
test: setup
	$(PY) -m pytest -q tests; rc=$$?; [ $$rc -ne 5 ] || echo "error: no tests collected" >&2; \
	  [ $$rc -ne 5 ] && exit $$rc || exit 1

test-gpu: setup
	$(PY) -m pytest -q -m gpu tests/gpu

# Deliberate one-line bugs in patches/ and vllm_overlay/; each must fail a CPU
# test (a table of who killed what). Not in CI: a patched tree per mutant.
# MUTANTS=name,name runs some of them.
mutants: setup
	PYTHONPATH=$(CURDIR)/scripts $(PY) -m dsv4warmup.mutants $(if $(MUTANTS),--only $(MUTANTS))

lint: setup
	$(PY) -m ruff check scripts tests
	$(PY) -m ruff format --check scripts tests

devtree: setup
	$(RUN) devtree $(BASE) $(or $(DEST),build/dev/v$(BASE))

regen: setup
	$(RUN) regen $(BASE) $(or $(FROM),build/dev/v$(BASE))

port: setup
	$(RUN) port $(FROM_BASE) $(BASE) $(or $(DEST),build/dev/v$(BASE))

fingerprints: setup
	$(RUN) fingerprints

clean:
	rm -rf build dist

# Patched wheel from an official one (WHEEL=path, or the official x86_64 wheel
# of BASE, fetched and verified); no CUDA build. Output in dist/.
# Upstream PRs: per patch a `git am` branch + PR body in build/pr/v<base>/
# (every series, or BASE=...), after sign-off / apply / vLLM-ruff checks.
BASE_ARG = $(if $(filter command line environment,$(origin BASE)),--base $(BASE))
.PHONY: wheel pr
wheel: setup
	$(RUN) wheel $(if $(WHEEL),--wheel $(WHEEL)) $(BASE_ARG)

pr: setup
	$(RUN) pr $(BASE_ARG) $(if $(OUT),--out $(OUT))

# GPU lab: pack pristine + patched trees into .lab/trees and build the package bundle
# (.lab/full/site.tar.xz, once) for scripts/lab/gpu-run.sh; see docs/gpu-results.md.
lab: setup .lab/full/site.tar.xz
	$(RUN) lab

.lab/full/site.tar.xz: scripts/lab/build-lab-bundle.sh
	mkdir -p .lab/full && cd .lab/full && PYTHON=$(CURDIR)/$(PY) bash $(CURDIR)/scripts/lab/build-lab-bundle.sh
