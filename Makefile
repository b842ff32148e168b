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

.PHONY: venv run test lint typecheck unit integration clean image image-gpu

$(BIN)/ocrstream: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

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
