# bertbeam: every target that needs the virtual environment creates it when missing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DATA ?= data

# make corpus: the default builds the Python docs (fetched from Debian) with a trained vocab.
INPUT ?= $(DATA)/python_docs/*.rst.txt,$(DATA)/python_docs/*/*.rst.txt
OUTPUT ?= out/corpus
ARGS ?= --doc_per_file --vocab_size 8000
RUNNER ?= DirectRunner
ifeq ($(RUNNER),DataflowRunner)
BEAM_ARGS = --runner DataflowRunner --project $(PROJECT) --region $(REGION) \
	--temp_location $(BUCKET)/tmp --staging_location $(BUCKET)/staging --setup_file ./setup.py
else
BEAM_ARGS = --runner $(RUNNER)
endif

.PHONY: setup test test-slow lint format corpus data bench-corpus bench-input clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

data: $(STAMP)
	$(BIN)/python -m pipeline.fetch_corpora --dest $(DATA)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)  # cases marked slow, run on purpose (pytest exits 5 when none are marked)
	$(BIN)/python -m pytest -q -m slow || [ $$? -eq 5 ]

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

corpus: $(STAMP)
	@if [ "$(INPUT)" = "$(DATA)/python_docs/*.rst.txt,$(DATA)/python_docs/*/*.rst.txt" ]; then \
		$(BIN)/python -m pipeline.fetch_corpora --dest $(DATA) python_docs; fi
	$(BIN)/python -m pipeline.build_corpus --input '$(INPUT)' --output $(OUTPUT) $(ARGS) $(BEAM_ARGS)

bench-corpus: $(STAMP)
	$(BIN)/python bench/corpus.py

bench-input: $(STAMP)
	$(BIN)/python bench/input.py

clean:
	rm -rf out .pytest_cache .ruff_cache
