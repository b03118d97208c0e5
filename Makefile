# Every target installs what it needs first, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
DOCS_STAMP := $(VENV)/.installed-docs
FLOORS_VENV ?= .venv-floors
FLOORS_STAMP := $(FLOORS_VENV)/.installed

EXTRAS_STAMP := $(VENV)/.installed-extras
MUTATION_STAMP := $(VENV)/.installed-mutation

.PHONY: install test test-full test-floors test-hosts coverage test-extras lint demo soak bench bench-quick docs mutation clean

SOAK_SECONDS ?= 180

install: $(STAMP)

# uv installs the project and its extras (a few times faster than pip's resolver and
# installer; bytecode compiled at install, as pip does), itself installed first where a
# venv made before it lacks it; pip stays in the venv for torch's CPU build, which pip's
# own configuration may point at a local wheel.
UV_INSTALL = $(BIN)/python -m pip install --quiet uv && \
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(UV_INSTALL) -e '.[dev]'
	touch $(STAMP)

# The suite in two parts: the tests that may share the machine, on TEST_WORKERS pytest-xdist
# workers (Ray's tests in two groups, each on one worker with its own local Ray instance:
# tests/conftest.py), then those marked `serial` (they time things, or count a child's CPU
# or threads) alone. `make test` runs the matrix's cover (tests/matrix.py); `make
# test-full` every case of it. A part that PYTEST_ARGS leaves empty (pytest's exit code 5) is not a failure.
TEST_WORKERS ?= 4
define run_suite
	$(1) -m pytest --matrix=$(2) -m 'not serial and not hosts' -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(1) -m pytest --matrix=$(2) -m 'serial and not hosts' $(PYTEST_ARGS) || [ $$? -eq 5 ]
endef

test: $(STAMP)
	$(call run_suite,$(BIN)/python,cover)

test-full: $(STAMP)
	$(call run_suite,$(BIN)/python,full)

# Branch coverage of aioenv/, child processes included (pyproject.toml's [tool.coverage]),
# of make test's cover of the matrix and of the whole matrix: the totals are printed, the
# reports left in coverage-cover.txt and coverage-full.txt.
define coverage_of
	rm -f .coverage .coverage.*
	$(BIN)/python -m coverage run -m pytest --matrix=$(1) -m 'not serial and not hosts' -n $(TEST_WORKERS) --dist loadgroup -q $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m coverage run -m pytest --matrix=$(1) -m 'serial and not hosts' -q $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m coverage combine -q
	$(BIN)/python -m coverage report > coverage-$(1).txt
	@echo "branch coverage of aioenv/ under --matrix=$(1): $$(grep ^TOTAL coverage-$(1).txt)"
endef

coverage: $(STAMP)
	$(call coverage_of,cover)
	$(call coverage_of,full)

# The suite against the lowest release pyproject.toml allows of each direct dependency
# (uv's lowest-direct resolution; what those depend on comes newest), on $(PYTHON).
$(FLOORS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --upgrade pip uv
	$(FLOORS_VENV)/bin/uv pip install --quiet --python $(FLOORS_VENV)/bin/python \
		--resolution lowest-direct -e '.[dev]'
	touch $(FLOORS_STAMP)

test-floors: $(FLOORS_STAMP)
	$(call run_suite,$(FLOORS_VENV)/bin/python,cover)

# The integrations (optional extras) and their tests, in one venv on one Python: SB3 brings
# torch, which is large (the CPU build, named so that pip never takes a CUDA one). Every
# test of these files must run there (AIOENV_EXTRAS_REQUIRED=1 fails a session that skips
# one), then Stable-Baselines3's own vec-env tests run against aioenv's adapter.
INTEGRATION_EXTRAS := dev,pettingzoo,serve,sb3
INTEGRATION_TESTS := tests/test_pettingzoo.py tests/test_serve.py tests/test_sb3.py \
	tests/test_thread_safety.py tests/test_torchrl.py
TORCH_CPU := torch==2.13.0
# TorchRL (its GymWrapper over AioVectorEnv in the integrations' tests; its pools in the
# benchmarks): 0.14 takes torch 2.11 and newer.
TORCHRL := torchrl==0.14.1
# Test-only packages of the integrations' tests (the OpenEnv clients and servers they face;
# Box2D, for CarRacing-v3 in thread workers: box2d 2.3.10 has wheels for CPython 3.10-3.13).
INTEGRATION_PACKAGES := openenv==0.10.0 'gymnasium[box2d]' $(TORCHRL)

$(EXTRAS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet '$(TORCH_CPU)' $(INTEGRATION_PACKAGES)
	$(BIN)/python -m pip install --quiet -e '.[$(INTEGRATION_EXTRAS)]'
	touch $(EXTRAS_STAMP)

test-extras: $(EXTRAS_STAMP)
	AIOENV_EXTRAS_REQUIRED=1 $(BIN)/python -m pytest $(INTEGRATION_TESTS) $(PYTEST_ARGS)
	SB3_SUITE_PYTHON=$(abspath $(BIN))/python ../shared/sb3_vec_suite/run.sh -k aio

# Hosts that come and go (tests/test_hosts.py): a Ray node and env servers on network
# namespaces, one host cut off mid-run. Making namespaces needs root; elsewhere the tests
# skip, saying so. They run alone (the rest of the suite is not beside them), in the
# integrations' venv (RemoteEnv and aioenv serve need the serve extra).
test-hosts: $(EXTRAS_STAMP)
	$(BIN)/python -m pytest -m hosts tests/test_hosts.py $(PYTEST_ARGS)

# mypy --strict checks the integration modules against the typed packages they import
# (Starlette, uvicorn, websockets, Stable-Baselines3), so lint installs the extras first.
lint: $(EXTRAS_STAMP)
	$(BIN)/ruff check aioenv tests examples benchmarks tools
	$(BIN)/ruff format --check aioenv tests examples benchmarks tools
	$(BIN)/mypy --strict aioenv tools/mutation

demo: $(STAMP)
	$(BIN)/python examples/async_loop.py

# The bench extra, and the sb3 one for Stable-Baselines3's SubprocVecEnv rows and TorchRL
# for its pools' rows (their torch the CPU build, as for the integrations' tests).
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet '$(TORCH_CPU)' $(TORCHRL)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,sb3]'
	touch $(BENCH_STAMP)

# The full run also redraws the docs' performance figure from its report and quotes the
# report's figures in the README and the docs (benchmarks/quote.py); a run narrowed by
# BENCH_ARGS leaves them alone.
bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)
	$(if $(BENCH_ARGS),,$(BIN)/python benchmarks/plot.py)
	$(if $(BENCH_ARGS),,$(BIN)/python benchmarks/quote.py)

bench-quick: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py --quick $(BENCH_ARGS)

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(UV_INSTALL) -e '.[dev,docs]'
	touch $(DOCS_STAMP)

# Warnings are errors; --keep-going reports all of them before failing.
docs: $(DOCS_STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The mutation check of the rules users depend on (tools/mutation/functions.toml names the
# functions, by rule): each function's mutants run against the tests that reach it (a
# coverage run of the suite maps them, cached in .mutation/); reports in mutation-report/.
# MUTATION_ARGS passes options, say --rules seeding, --jobs 2, or --pytest-args
# "--matrix=full" (then tools/mutation/run.py compare A/results.json B/results.json).
$(MUTATION_STAMP): $(STAMP) pyproject.toml
	$(UV_INSTALL) -e '.[dev,mutation]'
	touch $(MUTATION_STAMP)

mutation: $(MUTATION_STAMP)
	$(BIN)/python tools/mutation/run.py $(MUTATION_ARGS)

soak: $(STAMP)
	$(BIN)/python tests/faults/soak.py --seconds $(SOAK_SECONDS)

clean:
	rm -rf $(VENV) .venv-* .pytest_cache .mypy_cache .ruff_cache docs/_build .mutation mutation-report
