# Two commands on a fresh machine: `make up` (serve examples/local on this machine) and
# `make test`. Both create the virtualenv first; llama.cpp's llama-server compiles once per
# machine (`llmop setup`, cached in ~/.cache/llm-operator; what each first run costs:
# README.md, measured by tools/first_run.py).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The versions a new machine installs: what the tests last passed with (tools/lock.py, `make
# lock`), not the newest release of each of ~170 packages on the day.
LOCK := requirements/lock.txt
# and the packages builds install (the project's setuptools, the scikit-build-core that reads
# llama.cpp's source package), for uv and for every pip the recipes run (`llmop setup`, the
# images)
export UV_BUILD_CONSTRAINT := $(abspath $(LOCK))
export PIP_BUILD_CONSTRAINT := $(abspath $(LOCK))
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | cksum | cut -d' ' -f1)
BUILD_TOOLS := $(VENV)/.build-tools
CRD := config/crd/bases/ai.example.io_llmmodels.yaml
UP_ARGS ?=
# The suites start hundreds of Python processes (tests/local's `llmop up`, olah, the linters,
# helpers). Where PYTHONDONTWRITEBYTECODE is set (it was on the machine measured), each one
# compiled every module it imported from source, every time (1.8 of the 5.5 CPU-seconds
# `llmop up` takes to Ready). The recipes write bytecode: __pycache__ is ignored by git, by
# the images' content hashes and by their copies of the source.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv up plan test llama-server-background prebuild lint typecheck importlint unit crd golden clean tools images cluster \
  cluster-down llama-server lock

# The virtualenv with what compiles llama-server (cmake and ninja from PyPI, the `local`
# extra's pins): seconds, so that the compile starts before the project is installed.
# uv (from PyPI) installs into it: it downloads in parallel and, once its cache
# (~/.cache/uv) holds the wheels, asks no index again (pip: 2 min 12 s on a new machine and
# ~50 s warm; uv: ~25 s and ~4 s). It reads PyPI, or UV_INDEX_URL, not pip's config. pip
# stays in the virtualenv for what downloads with it (`llmop setup`, tools/images.py).
# Every install is constrained by $(LOCK).
UV := $(BIN)/uv pip install --python $(BIN)/python -c $(LOCK)
$(BUILD_TOOLS): $(LOCK)
	@echo ">> creating $(VENV) with uv, cmake and ninja"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(LOCK) uv
	$(UV) --quiet pip cmake ninja
	@touch $@

$(STAMP): pyproject.toml $(BUILD_TOOLS)
	@echo ">> installing llm-operator with its test and local extras into $(VENV) (log: $(VENV)/pip-install.log)"
	@$(UV) -e '.[test,local]' > $(VENV)/pip-install.log 2>&1 \
	  || { tail -n 40 $(VENV)/pip-install.log; exit 1; }
	@rm -f $(VENV)/.installed-* && touch $@

# The virtualenv with the project and its pinned dependencies, nothing else.
venv: $(STAMP)

# llama.cpp's llama-server for this machine, compiled once (progress shown) and cached.
llama-server: $(STAMP)
	@$(BIN)/llmop setup >/dev/null

# The main job: Gemma 3 270M (from PyPI, offline) on llama.cpp behind the gateway and the
# MCP server, until Ctrl-C. `make up UP_ARGS=--detach` returns once it serves.
up: $(STAMP)
	$(BIN)/llmop up examples/local $(UP_ARGS)

# What a cluster would get: validate, plan and render the guide's samples.
plan: $(STAMP)
	@mkdir -p .state
	$(BIN)/llmop validate -f config/samples
	$(BIN)/llmop plan -f config/samples
	$(BIN)/llmop render -f config/samples > .state/manifests.yaml
	@echo ">> rendered $$(grep -c '^kind:' .state/manifests.yaml) objects to .state/manifests.yaml (kubectl apply -f .state/manifests.yaml)"

# The linters run beside the suites (tools/test_suites.py --checks): a failure still fails.
test: llama-server-background tools prebuild
	@$(BIN)/python tools/test_suites.py --checks

# llama-server compiled in the background (`llmop setup` as a module of the source tree,
# log .state/llama-server.log) while uv installs the project and apt, the linters and the
# tests that need no engine run: on 2 cores the compile is 5-6 minutes that the real-node
# suite's first module waits for. Its source (a 77 MB sdist, kept in the cache) is
# downloaded first, alone, so that nothing else downloads beside what the compile waits
# for. A test that needs llama-server waits on the build's lock (tests/localstack.py), the
# real-node images on the cached binary.
llama-server-background: $(BUILD_TOOLS)
	@mkdir -p .state
	@PYTHONPATH=src $(BIN)/python -m llm_operator.local.llama_build --fetch-source
	@echo ">> [$$(date +%T)] compiling llama-server in the background (log: .state/llama-server.log)"
	@(PYTHONPATH=src nohup $(BIN)/python -m llm_operator.local.llama_build \
	  > .state/llama-server.log 2>&1 &)

# vLLM's image and the BF16 model (tools/images.py, tools/gemma_hf.py; several minutes on a
# new machine, nothing once cached) are needed only by the real-node suite's last modules:
# built in the background meanwhile, at a lower CPU priority than the llama-server compile
# that the suite's first module waits for. The suite waits on tools/images.py's build lock
# for what is still being built. Log: .state/prebuild.log.
prebuild: tools $(STAMP)
	@mkdir -p .state
	@if [ "$$(id -u)" = 0 ]; then (nohup nice -n 10 sh -c '$(BIN)/python tools/images.py \
	  vllm-cpu && $(BIN)/python tools/gemma_hf.py' > .state/prebuild.log 2>&1 &); fi

# Debian's prometheus (promtool and the Prometheus server the tests run), etcd-server
# (for the real control plane), tmux (`llmop chat` tested at a terminal), redis-server,
# chromium and chromium-driver (the web console in a real browser, through Selenium), and
# what the real test node runs (tests/realnode.py): runc, the CNI plugins, iptables,
# conntrack, dnsmasq, iproute2 (also tests/netns.py's test hosts), and mmdebstrap for the
# images; the Kubernetes binaries of ../shared/k8s and containerd 2.3.4 of
# ../shared/containerd unpacked into .cache/k8s/bin (hash-checked).
NODE_APT := $(if $(shell command -v runc),,runc) \
  $(if $(wildcard /usr/lib/cni/bridge),,containernetworking-plugins) \
  $(if $(shell command -v iptables),,iptables) $(if $(shell command -v conntrack),,conntrack) \
  $(if $(shell command -v dnsmasq),,dnsmasq-base) $(if $(shell command -v ip),,iproute2) \
  $(if $(shell command -v mmdebstrap),,mmdebstrap)
APT_TOOLS := $(if $(shell command -v promtool),,prometheus) $(if $(shell command -v etcd),,etcd-server) \
  $(if $(shell command -v tmux),,tmux) $(if $(shell command -v redis-server),,redis-server) \
  $(if $(shell command -v chromium),,chromium) $(if $(shell command -v chromedriver),,chromium-driver) \
  $(NODE_APT)
tools:
	@if [ -n "$(strip $(APT_TOOLS))" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo ">> installing Debian's $(strip $(APT_TOOLS))"; \
	    apt-get update -qq -o Acquire::Retries=3 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Acquire::Retries=3 $(APT_TOOLS) >/dev/null; \
	  else echo "missing: sudo apt-get install $(APT_TOOLS)" >&2; exit 1; fi; fi
	@$(PYTHON) tools/k8s_binaries.py

lint: $(STAMP)
	@echo ">> [$$(date +%T)] ruff, mypy, import-linter"
	$(BIN)/ruff check src tests tools $(wildcard bench)

typecheck: $(STAMP)
	$(BIN)/mypy

importlint: $(STAMP)
	$(BIN)/lint-imports

# The real-node suite and the others side by side (tools/test_suites.py): the node's tests
# mostly wait on pods and engines; the others, at a lower CPU priority, use what they leave.
unit: $(STAMP)
	@$(BIN)/python tools/test_suites.py

# The operator's and llama-server's images as docker-archive tars, without Docker or a
# registry (tools/images.py; cached by content hash in ~/.cache/llm-operator).
images: tools $(STAMP)
	$(BIN)/python tools/images.py all

# A control plane and one real node on this machine (root), until `make cluster-down`.
cluster: tools $(STAMP)
	$(BIN)/python tests/testcluster.py up

cluster-down:
	$(PYTHON) tests/testcluster.py down

# Re-pin requirements/lock.txt and requirements/vllm-image.txt after changing a requirement;
# `make lock LOCK_ARGS=--upgrade` moves every pin to the newest release (then `make test`).
LOCK_ARGS ?=
lock: $(BUILD_TOOLS)
	$(BIN)/python tools/lock.py $(LOCK_ARGS)

crd: $(STAMP)
	$(BIN)/llmop crd -o $(CRD)

golden: $(STAMP)
	$(BIN)/pytest -q tests/render --update-golden

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache .pytest_cache
