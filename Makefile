# `make demo` and `make test` create .venv and install what they need themselves.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= python3

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ".[all]" --group dev
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/memory-core demo $(DEMO_ARGS)

test: $(STAMP)
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench.run $(if $(QUICK),--quick,)

clean:  # keeps var/memory.db and the outbox (your data); removes the demo's state and the caches
	rm -rf $(VENV) var/demo var/demo.lock .pytest_cache .mypy_cache .ruff_cache
