# Two commands on a fresh machine: `make up` (render and plan the samples) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
CRD := config/crd/bases/ai.example.io_llmmodels.yaml

.PHONY: up test lint typecheck importlint unit crd golden clean tools

$(STAMP): pyproject.toml
	@echo ">> creating $(VENV) and installing llm-operator with its test extras"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

up: $(STAMP)
	@mkdir -p .state
	$(BIN)/llmop validate -f config/samples
	$(BIN)/llmop plan -f config/samples
	$(BIN)/llmop render -f config/samples > .state/manifests.yaml
	@echo ">> rendered $$(grep -c '^kind:' .state/manifests.yaml) objects to .state/manifests.yaml (kubectl apply -f .state/manifests.yaml)"

test: tools lint typecheck importlint unit

# Debian's prometheus package provides promtool and the Prometheus server the tests run.
tools:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo ">> installing Debian's prometheus (promtool, prometheus)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; \
	  else echo "promtool is missing: sudo apt-get install prometheus" >&2; exit 1; fi; }

lint: $(STAMP)
	$(BIN)/ruff check src tests tools $(wildcard bench)

typecheck: $(STAMP)
	$(BIN)/mypy

importlint: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q

crd: $(STAMP)
	$(BIN)/llmop crd -o $(CRD)

golden: $(STAMP)
	$(BIN)/pytest -q tests/render --update-golden

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache .pytest_cache
