# The two commands of the README:
#   make run    a fresh machine to the main job (services, agents, sample scans through the pipeline)
#   make test   everything CI checks: venv, services, ruff, mypy, pytest; stops what it started
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SOURCES := ocrstream streams processors schemas storage tests

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= ocrstream

.PHONY: venv lock run test lint typecheck unit integration clean image image-gpu

# constraints.txt pins every package of the venv to the set the tests last passed with, so a
# release upstream cannot change a fresh checkout's results; `make lock` re-resolves it.
$(BIN)/ocrstream: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

lock:  # the newest versions pyproject.toml allows, into constraints.txt; then run `make test`
	rm -rf .lock-venv && $(PY) -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q -e '.[dev]'
	{ echo "# The packages the tests last passed with (make lock; pip install -c constraints.txt)."; \
	  .lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip=='; } > constraints.txt
	rm -rf .lock-venv

venv: $(BIN)/ocrstream

run: venv
	bash scripts/run.sh

test: venv
	bash scripts/test.sh

lint: venv
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -m "not integration" --durations=10 tests

integration: venv  # needs the local services: .venv/bin/ocrstream infra up
	$(BIN)/pytest -m integration --durations=10 tests

clean:
	-$(BIN)/ocrstream infra down
	rm -rf .infra

# The container images (docs/deploy.md): the agents on CPU, and the OCR worker on NVIDIA GPUs.
image:
	docker build -t $(IMAGE):$(VERSION) .

image-gpu:
	docker build -f Dockerfile.gpu -t $(IMAGE):$(VERSION)-gpu .
