# One command per job. `make run` and `make test` work on a fresh machine with
# Python 3.11+ and make: they bootstrap uv into .tools/ and sync the workspace.
PYTHON ?= python3
UV_VERSION := 0.13.8
UV := .tools/bin/uv
VENV := .venv
BIN := $(VENV)/bin
PROVIDER ?=

.DEFAULT_GOAL := help
.PHONY: help install run test pytest lint format bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet "uv==$(UV_VERSION)"

$(VENV)/.synced: $(UV) uv.lock pyproject.toml libs/*/pyproject.toml services/*/pyproject.toml
	$(UV) sync --all-packages --frozen --python $(PYTHON)
	@touch $@

install: $(VENV)/.synced  ## create .venv with every service, the CLI and the dev tools

run: install  ## start the whole system (embedded NATS + PostgreSQL unless TETHER_*_URL are set)
	$(if $(PROVIDER),TETHER_PROVIDER=$(PROVIDER)) $(BIN)/tether up

lint: install  ## ruff format check, ruff lint, mypy strict, import contracts
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy libs/common/src libs/client/src services/*/src tests bench
	$(BIN)/lint-imports

format: install  ## rewrite the code in house format
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint pytest  ## lint, then the whole suite against real NATS and PostgreSQL

pytest: install
	$(BIN)/pytest

bench: install  ## print the benchmark figures (adds the bench-only dependency group)
	$(UV) sync --all-packages --frozen --python $(PYTHON) --group bench
	$(BIN)/python -m bench

clean:  ## remove the environments
	rm -rf .venv .tools
