# Ratings enrichment: the commands a user has. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
STACK := $(BIN)/python -m infra.stack
# The stack's state folder, as infra.stack chooses it: STACK_STATE_DIR, else one per database.
STATE := $(or $(STACK_STATE_DIR),$(if $(filter postgres,$(STACK_SOURCE)),.state-postgres,.state))

.PHONY: help install up down status clean demo loadgen test test-secured test-postgres test-long test-unit test-integration lint format typecheck env bench bench-job bench-table bench-versus bench-scale bench-memory bench-views bench-backfill bench-pg faults lake-query views-job views-api view

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo "==> Python environment in $(VENV) (first run builds pyspark: a few minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[job,services,dev]'
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

DURATION ?= 0
RATE ?= 100
CUSTOMERS ?= 3000
demo: up ## the pipeline end to end with load and a live view (DURATION=120 runs unattended; RATE, CUSTOMERS)
	$(BIN)/python -m infra.demo --duration $(DURATION) --rate $(RATE) --customers $(CUSTOMERS)

loadgen: up ## only the load generator, until Ctrl-C (RATE, CUSTOMERS)
	@set -a && . $(STATE)/stack.env && set +a && LOADGEN_DB_PASSWORD="$$APP_DB_PASSWORD" \
	  LOADGEN_DB_KIND="$$CUSTOMER_DB" LOADGEN_DB_PORT="$$CUSTOMER_DB_PORT" \
	  LOADGEN_BOOTSTRAP_SERVERS="$$KAFKA_BOOTSTRAP_SERVERS" $(BIN)/python -m services.loadgen --rate $(RATE) --customers $(CUSTOMERS)

views-job: up ## the materialized views job (Spark, RocksDB state, changelog topics), until Ctrl-C
	@set -a && . $(STATE)/stack.env && set +a && VIEWS_JOB_SPARK_JARS="$$SPARK_JARS" \
	  VIEWS_JOB_BOOTSTRAP_SERVERS="$$KAFKA_BOOTSTRAP_SERVERS" $(BIN)/python -m enrichment_job.views

views-api: up ## the views query service on 127.0.0.1:8087 (pull by key, SSE changes), until Ctrl-C
	@set -a && . $(STATE)/stack.env && set +a && VIEWS_BOOTSTRAP_SERVERS="$$KAFKA_BOOTSTRAP_SERVERS" \
	  $(BIN)/python -m services.views

NAME ?= customer_ratings
KEY ?=
view: $(STAMP) ## a view: print it (NAME=, KEY= one row, FOLLOW=1 its changes), or SQL=validate|create|replace|list|show|follow|drop (FILE= or NAME=)
	@set -a && . $(STATE)/stack.env && set +a && VIEWS_JOB_BOOTSTRAP_SERVERS="$$KAFKA_BOOTSTRAP_SERVERS" \
	  $(if $(SQL),$(BIN)/python -m enrichment_job.views $(SQL) $(if $(filter drop show follow,$(SQL)),$(NAME),$(FILE)),\
	  $(BIN)/python -m services.views.cli $(if $(FOLLOW),follow $(NAME) $(if $(KEY),--key $(KEY)),show $(NAME) $(KEY)))

test: up ## the whole test suite against the real stack, then the secured stack's and PostgreSQL's (what CI runs)
	$(BIN)/pytest
	$(MAKE) test-secured
	$(MAKE) test-postgres

# The secured mode (SASL/SCRAM and ACLs) keeps its own state folder: a state folder keeps its mode.
SECURED := STACK_STATE_DIR=$(CURDIR)/.state-secured STACK_KAFKA_SECURITY=scram STACK_SPARK_CLUSTER=false
test-secured: $(STAMP) ## stops the stack, starts the secured one (SASL/SCRAM, ACLs), tests through it, stops it
	$(STACK) down
	@set -e; trap '$(SECURED) $(STACK) down' EXIT; $(SECURED) $(STACK) up; \
	  $(SECURED) $(BIN)/pytest tests/integration/secured

# PostgreSQL as the customer database: its stack has a state folder of its own (.state-postgres).
# The job's state in S3 and on the Spark cluster are tested on the MariaDB stack: nothing there
# depends on the database.
POSTGRES := STACK_SOURCE=postgres STACK_STATE_DIR=$(CURDIR)/.state-postgres STACK_SPARK_CLUSTER=false
POSTGRES_TESTS := tests/integration/postgres tests/integration/services/loadgen/test_database.py \
  $(addprefix tests/integration/enrichment_job/test_exactly_once.py::,\
    test_f_kill_9_and_restart_every_rating_and_alert_exactly_once[local] \
    test_f_after_the_crash_the_customer_table_holds_each_change_once[local]) \
  $(addprefix tests/integration/enrichment_job/test_semantics.py::,\
    test_a_rating_joins_the_row_valid_at_its_time_and_updates_apply_later \
    test_b_after_a_delete_ratings_are_unmatched_and_a_reinsert_matches_again \
    test_d_grace_joins_a_row_created_shortly_after_the_rating_and_not_later \
    test_e_records_of_one_customer_come_out_in_input_order \
    test_c_a_fresh_job_waits_for_the_table_so_no_rating_is_unmatched_for_being_early)
test-postgres: $(STAMP) ## stops the stack, starts one on PostgreSQL, runs the join's tests through it, stops it
	$(STACK) down
	@set -e; trap '$(POSTGRES) $(STACK) down' EXIT; $(POSTGRES) $(STACK) up; \
	  $(POSTGRES) $(BIN)/pytest $(POSTGRES_TESTS)

test-long: up ## what make test leaves out: the fault-matrix runs (its quick rows with the self-tests, 45 min on 2 cores; the faults a cluster adds, 11 min) and the waiting cap by count
	$(BIN)/pytest -m long tests/integration

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

bench: up ## every benchmark, then bench-results/bench.json and bench.png (ARGS="--only es_sink s3_sink")
	$(BIN)/python -m infra.bench $(ARGS)

bench-job: up ## enrichment job figures: fixed-rate latency and saturation throughput (ARGS="--rate 2000")
	$(BIN)/python -m infra.bench.job $(ARGS)

bench-versus: up ## the job beside the Kafka Streams reference (infra/bench/kstreams), one at a time: start, throughput, p99 (ARGS="--n 300000")
	$(BIN)/python -m infra.bench.versus $(ARGS)

bench-scale: up ## the job's rate with 1, 2, 3 Spark workers capped at 0.3 core each (cgroups), beside Kafka Streams with 1 and 3 (ARGS="--n 1000000 --out F")
	$(BIN)/python -m infra.bench.scale $(ARGS)

bench-memory: up ## the job's driver memory on a backlog of 450 KB ratings, small ones beside (ARGS="--max-batch-bytes 0 134217728")
	$(BIN)/python -m infra.bench.backlog_memory $(ARGS)

bench-views-memory: up ## the views job's memory on a backlog of rows of ~850 KB, one per customer (ARGS="--max-batch-bytes 0 33554432")
	$(BIN)/python -m infra.bench.views_memory $(ARGS)

bench-views: up ## the views beside the job at 5,000/s: job latency, views freshness, pull queries, service restart (ARGS="--in-job")
	$(BIN)/python -m infra.bench.views $(ARGS)

bench-backfill: up ## a view in SQL created over 1,000,000 enriched records while ratings flow at 5,000/s: time to live, the built-ins' lag (ARGS="--history 200000")
	$(BIN)/python -m infra.bench.backfill $(ARGS)

bench-pg: install ## large reads over the views' PostgreSQL protocol beside PostgreSQL itself: \copy, FETCH chunks, FETCH ALL, key ranges (no stack; ARGS="--rows 1000000")
	$(BIN)/python -m infra.bench.pg_reads $(ARGS)

faults: up ## the fault matrix under load: crashes, outages, hostile input; a table and bench-results/faults.json (ARGS="--quick")
	$(BIN)/python -m infra.faults $(ARGS)

bench-table: up ## the in-memory customer table by size: start, memory per version, one batch's step
	$(BIN)/python -m infra.bench.table $(ARGS)

lake-query: up ## the data lake's ratings per day and club status (pyarrow over the S3 server)
	@set -a && . $(STATE)/stack.env && set +a && S3_SINK_ENDPOINT_URL="$$S3_ENDPOINT_URL" S3_SINK_BUCKET="$$S3_BUCKET" \
	  S3_SINK_REGION="$$S3_REGION" S3_SINK_ACCESS_KEY="$$S3_ACCESS_KEY" S3_SINK_SECRET_KEY="$$S3_SECRET_KEY" \
	  $(BIN)/python -m services.s3_sink.lake_query
