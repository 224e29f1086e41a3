# One entry point for humans and CI. Every target works on a fresh clone with nothing
# installed and is idempotent: the venv is rebuilt only when the install inputs change.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all lint docs reproduce reproduce-full tune benchmark dist clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[agents,dev,docs,minari,multiagent,plot,postgres,serve,tensorboard,tune,zoo]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# How the tests run: one thread per process, and bytecode written (into the git-ignored
# __pycache__/) even where the environment sets PYTHONDONTWRITEBYTECODE, since every
# pytest-xdist worker and each of the ~100 interpreters the tests start (CLI, servers)
# would otherwise compile the packages and the test modules from source again.
TEST_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=

# `make test` is the fast tier: ruff (a second), then everything but the tests marked slow
# (tests/conftest.py says which). `make test-all` is what CI runs (.ci/run): ruff, then the
# whole suite with mypy beside it, its report printed after theirs; mypy fills the time the
# workers wait on the servers and processes they start (a fresh clone's cold type check
# is about 28 s of CPU, which is why the fast tier leaves it to `make lint`). One
# pytest-xdist worker per core (a module's tests stay on one worker: its fixtures run
# once). Either failing fails the target.
PYTEST := $(TEST_ENV) $(BIN)/python -m pytest -q -n auto --dist loadscope

test: install
	$(BIN)/ruff check .
	$(PYTEST) -m "not slow"

test-all: install
	$(BIN)/ruff check .
	@typed=$$(mktemp); $(BIN)/mypy >$$typed 2>&1 & mypy=$$!; \
	echo '$(PYTEST)'; $(PYTEST); tests=$$?; \
	wait $$mypy; checked=$$?; echo '$(BIN)/mypy'; cat $$typed; rm -f $$typed; \
	[ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# The documentation site (mkdocs.yml, docs/) into the git-ignored site/: --strict turns every
# warning (a broken link, anchor or API reference, a page missing from the nav) into an error.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# ADDRESS=auto (or ray://HEAD:10001): every experiment's units as Ray tasks on that cluster,
# the same files as on this machine (docs/reproducing.md); the same command resumes a run.
ADDRESS ?=
ON_CLUSTER = $(if $(ADDRESS),--address $(ADDRESS))

reproduce: install
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m experiments all --tasks test $(ON_CLUSTER)

reproduce-full: install
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m experiments all --scale full --tasks test $(ON_CLUSTER)

# The equal-budget tuning sweeps on a one-machine Ray cluster; writes experiments/tuned/.
# On an existing cluster: $(BIN)/python -m experiments tune --address auto (or ray://HOST:10001).
tune: install
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m experiments tune

benchmark: install
	$(BIN)/python benchmarks/throughput.py --output benchmarks/results/throughput.md
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python benchmarks/allocators.py --output benchmarks/results/allocators.md
	$(BIN)/python benchmarks/vector_throughput.py --output benchmarks/results/vector_throughput.md
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/draw_batching.py --output benchmarks/results/draw_batching.md
	$(BIN)/python benchmarks/vector_memory.py --output benchmarks/results/vector_memory.md
	$(BIN)/python benchmarks/multitenant_throughput.py --output benchmarks/results/multitenant_throughput.md
	$(BIN)/python benchmarks/serve_latency.py --output benchmarks/results/serve_latency.md

# The wheel and the sdist in dist/ (the wheel is built from the sdist, so the sdist is
# known to hold what the wheel needs). `pip install dist/cost_envs-*.whl` gives the envs
# only (Gymnasium, NumPy, PyYAML); add the agents extra for torch and SB3.
dist: install
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

clean:
	rm -rf $(VENV) build dist site *.egg-info
