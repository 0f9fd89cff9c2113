# Two commands do all set-up:
#   make example   install gradetrail (with its viewer) in .venv and run the bundled GSM8K eval
#   make test      install gradetrail with its test dependencies and run the test suite
#   make wheel     build dist/gradetrail-<version>-py3-none-any.whl (to install elsewhere)
#   make docs      build the documentation site into site/ (strict: a broken link fails)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: example test lint bench wheel docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[view]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

example: $(VENV)/.installed
	$(BIN)/gradetrail run examples/gsm8k.yaml

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/bench_rescore.py

wheel: | $(BIN)/python
	$(BIN)/python -m pip wheel -q --no-deps -w dist .

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $@

docs: $(VENV)/.installed-docs
	$(BIN)/python scripts/gen_docs.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
