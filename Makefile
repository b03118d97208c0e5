# Every target installs what it needs first, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint demo soak clean

SOAK_SECONDS ?= 180

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check aioenv tests examples
	$(BIN)/ruff format --check aioenv tests examples
	$(BIN)/mypy --strict aioenv

demo: $(STAMP)
	$(BIN)/python examples/async_loop.py

soak: $(STAMP)
	$(BIN)/python tests/faults/soak.py --seconds $(SOAK_SECONDS)

clean:
	rm -rf $(VENV) .venv-* .pytest_cache .mypy_cache .ruff_cache
