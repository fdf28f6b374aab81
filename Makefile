# Ratings enrichment: the commands a user has. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
STACK := $(BIN)/python -m infra.stack

.PHONY: help install up down status clean demo test test-unit test-integration lint format typecheck env bench-job

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo "==> Python environment in $(VENV) (first run builds pyspark: a few minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## install Python packages and the stack's artifacts (Maven, apt), cached
	$(STACK) install

up: $(STAMP) ## start Kafka, Connect+Debezium, MariaDB, Elasticsearch, S3; returns when all are usable
	$(STACK) up

down: $(STAMP) ## stop every component; data is kept
	$(STACK) down

status: $(STAMP) ## show each component: state, health, ports, memory, log file
	$(STACK) status

clean: $(STAMP) ## stop and wipe the stack's state (downloads stay cached)
	$(STACK) clean

env: $(STAMP) ## print how clients reach the stack (secrets masked)
	$(STACK) env

demo: up ## the product end to end (for now: the stack and its status)
	$(STACK) status

test: up ## the whole test suite against the real stack (what CI runs)
	$(BIN)/pytest

test-unit: $(STAMP) ## tests that need no running service
	$(BIN)/pytest tests/unit

test-integration: up ## tests against the real stack only
	$(BIN)/pytest tests/integration

lint: $(STAMP) ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP) ## ruff format and fix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP) ## mypy, strict
	$(BIN)/mypy

bench-job: up ## enrichment job figures: fixed-rate latency and saturation throughput (ARGS="--rate 2000")
	$(BIN)/python -m enrichment_job.bench $(ARGS)
