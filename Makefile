# privembed developer tasks. `make demo` and `make test` work on a fresh machine from a clean clone.
PYTHON ?= python3
## every step of `make test` says how long it took (bash's `time`, worded per target): CI's
## time per stage reads off these lines
SHELL := /bin/bash
export TIMEFORMAT = make: a step of $@ took %0R s
## Two environments that never touch each other: `make test` (re)installs privembed into .venv
## while the demo's .venv-demo stays as it is, in use or not (issue 40.2).
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
DEMO_VENV  ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

LC_VENV ?= .venv-langchain
LC_STAMP := $(LC_VENV)/.installed

.PHONY: install browser demo test after-pytest lint typecheck pytest claims mutations langchain-tests wheel-smoke bench clean

# pip prints what it collects and installs (no -q): a first install takes a while, visibly
PIP_SHOW := --progress-bar on --disable-pip-version-check

# .venv/bin/python, .venv-demo/bin/python
%/bin/python:
	@echo "make: creating the virtual environment $*"
	$(PYTHON) -m venv $*
	$*/bin/python -m pip install $(PIP_SHOW) --upgrade pip

## What the demo and the README's commands need only (no Ray, LangChain, spaCy or test tools),
## torch CPU included, in its own environment.
$(DEMO_STAMP): pyproject.toml constraints.txt | $(DEMO_VENV)/bin/python
	@echo "make: installing what 'privembed demo' needs into $(DEMO_VENV) (torch CPU, sentence-transformers, ONNX Runtime, FAISS, pyarrow, Faker)"
	$(DEMO_VENV)/bin/python -m pip install $(PIP_SHOW) -c constraints.txt -e '.[demo]'
	touch $(DEMO_STAMP)

## Everything, for development and the whole test suite.
$(STAMP): pyproject.toml constraints.txt | $(VENV)/bin/python
	@echo "make: installing privembed with every extra and the development tools into $(VENV)"
	time $(PIP) install $(PIP_SHOW) -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Install what the demo needs and run the main job on the bundled sample.
demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/privembed demo
	@echo "make: the README's commands run in this environment: . $(DEMO_VENV)/bin/activate"

## Install everything and run the whole test suite (lint, format, types, tests, the built wheel).
test: $(STAMP) browser lint typecheck pytest after-pytest

## The checks that need the suite to have passed run side by side: the claims' mutations (two
## pytest copies) beside LangChain's suites and the built wheel's smoke test, whose virtual
## environments, pip installs and wheel build wait on the disk more than they use the CPU (CI
## time, issue 41.4). Each one's output is printed whole when it ends (--output-sync).
after-pytest: $(STAMP)
	$(MAKE) --no-print-directory -j3 --output-sync=target claims langchain-tests wheel-smoke

## Debian's chromium renders the HTML report in a test (installed when missing and root).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "the report test needs Debian's chromium: sudo apt-get install chromium"; exit 1; fi; }

lint: $(STAMP)
	time $(VENV)/bin/ruff check src tests tests_langchain benchmarks tools
	time $(VENV)/bin/ruff format --check src tests tests_langchain benchmarks tools
	time $(VENV)/bin/lint-imports --no-cache   # the layers of docs/architecture.md ([tool.importlinter])

typecheck: $(STAMP)
	time $(VENV)/bin/mypy

## two worker processes (pytest-xdist), one test file per worker at a time (--dist loadfile:
## a module's fixtures stay in one process); PYTEST_WORKERS=0 runs everything in this process
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	time $(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --durations=25

## Every security claim fails its tests when it is broken (claims/claims.toml, tools/claims):
## each claim's mutation is applied to a copy of the source tree and one of its tests must fail.
## `claims` (part of `test`, so of CI) runs one mutation of every claim; `mutations` runs them all.
claims: $(STAMP)
	time $(PY) -m tools.claims check
	time $(PY) -m tools.claims mutate --fast --jobs 2

mutations: $(STAMP)
	$(PY) -m tools.claims check
	$(PY) -m tools.claims mutate

## LangChain's standard suites, in their own environment: their pytest plugins stay out of ours.
$(LC_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(LC_VENV)
	$(LC_VENV)/bin/python -m pip install -q --upgrade pip
	$(LC_VENV)/bin/python -m pip install -q -c constraints.txt -e . langchain-core 'langchain-tests>=1.1'
	touch $(LC_STAMP)

langchain-tests: $(LC_STAMP)
	time $(LC_VENV)/bin/python -m pytest -q -c tests_langchain/pytest.ini tests_langchain

## A wheel built as a user gets it, installed into a clean environment, and run there.
wheel-smoke: $(STAMP)
	time bash .ci/wheel-smoke $(PY)

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(LC_VENV) .pytest_cache .mypy_cache .ruff_cache build dist
