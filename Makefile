# Everything a run needs is installed here, from pyproject.toml and uv.lock: nothing by hand.
PYTHON ?= python3
VENV := .venv
SAMVENV := .venv-sam
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
# The uv the lock names (uv.lock: `name = "uv"` then its version): the bootstrap installs that one.
UV_VERSION := $(shell sed -n '/^name = "uv"$$/{n;s/^version = "\(.*\)"$$/\1/p;}' uv.lock)
STAMP := $(VENV)/.installed
SAMSTAMP := $(SAMVENV)/.installed
CHECKOVVENV := .venv-checkov
# Every function's artifact, laid out as `sam build` does, for this Python (infercrane local build).
ARTIFACTS := .aws-sam/build/manifest.json
ARTIFACT_INPUTS := $(shell find shared/infercrane functions layers -type f -not -name '*.pyc' 2>/dev/null)
export SAM_CLI_TELEMETRY := 0
export AWS_DEFAULT_REGION ?= us-east-1

.PHONY: help install lock browser bytecode demo test test-all test-fast coverage lint typecheck validate unit integration e2e bench qualify qualify-providers clean

help:
	@echo "make demo      - start the local stack in-process and run the service end to end"
	@echo "make test      - validate the template, lint, type-check and run every test (the CI gate)"
	@echo "make test-all  - every test of every tier, without the gates"
	@echo "make test-fast - unit and integration tests only, in parallel (the edit loop)"
	@echo "make coverage  - unit and integration tests with line coverage of shared/ and functions/"
	@echo "make validate  - cfn-lint, sam validate --lint and checkov (offline)"
	@echo "make bench     - measured ratios of the hot paths (writes bench/results.json)"
	@echo "make qualify   - local qualification: one row per promise, evidence JSON (.qualify/)"
	@echo "make qualify-providers - the same scenarios against real clouds (skips without credentials)"

# uv, at the lock's version, installs the rest (a line per package; pip took minutes, silently).
# Bootstrapped once with the venv's pip; from then on `uv sync` keeps it at the lock's version.
$(UV):
	@echo "== $(VENV): python venv and uv $(UV_VERSION)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on --disable-pip-version-check "uv==$(UV_VERSION)"

# The venv is exactly uv.lock (every extra, the test tools); a lock that no longer matches
# pyproject.toml stops here, naming the command that refreshes it.
$(STAMP): pyproject.toml uv.lock $(UV)
	@echo "== $(VENV): the locked environment (uv sync: uv.lock, every extra)"
	@$(UV) lock --check --offline --quiet 2>/dev/null || { \
	  echo "uv.lock is stale against pyproject.toml: run \`make lock\` and commit uv.lock with it." >&2; \
	  exit 1; }
	$(UV) sync --frozen --all-extras
	@touch $(STAMP)

# After any change to pyproject.toml's dependencies: resolves them all together again (every
# extra, every layer, for every supported Python and platform; other versions kept) into uv.lock,
# installs it, regenerates the layers' requirements.txt and checks that each of their pins has a
# wheel for Lambda's Python 3.12 arm64. Commit pyproject.toml, uv.lock and the requirements with it.
lock: $(UV)
	$(UV) lock
	@$(MAKE) --no-print-directory $(STAMP) $(ARTIFACTS)
	$(PY) -m infercrane.local.lock

# AWS SAM pins boto3/click/pydantic versions of its own: it lives in its own venv.
$(SAMSTAMP): $(UV)
	@echo "== $(SAMVENV): AWS SAM CLI and cfn-lint"
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SAMVENV)
	$(UV) pip install --python $(SAMVENV)/bin/python "aws-sam-cli>=1.120,<2" "cfn-lint>=1.20,<2"
	@touch $(SAMSTAMP)

# checkov (the IaC scanner in `make validate`) pins boto3, pydantic and click versions of its
# own that fight aws-sam-cli's: it gets a venv of its own too, at one exact version so that a new
# release's new checks never fail a build nobody changed.
CHECKOV_VERSION := 3.3.30
CHECKOVSTAMP := $(CHECKOVVENV)/.installed-$(CHECKOV_VERSION)
$(CHECKOVSTAMP): $(UV)
	@echo "== $(CHECKOVVENV): checkov $(CHECKOV_VERSION)"
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(CHECKOVVENV)
	$(UV) pip install --python $(CHECKOVVENV)/bin/python "checkov==$(CHECKOV_VERSION)"
	@touch $(CHECKOVSTAMP)

# Rebuilt only when an input changed (and then only the artifacts whose inputs changed).
$(ARTIFACTS): $(STAMP) template.yaml pyproject.toml uv.lock $(ARTIFACT_INPUTS)
	@echo "== .aws-sam/build: every function's artifact and its layers (infercrane local build)"
	$(VENV)/bin/infercrane local build
	touch $(ARTIFACTS)

install: $(STAMP) $(ARTIFACTS) browser

# The package's bytecode, compiled where it is edited (only what changed since the last run).
# Where PYTHONDONTWRITEBYTECODE is set (as on these machines and in CI), no process caches what it
# compiles, so every `infercrane` process (hundreds in the e2e tier) would compile the modules it
# imports again: ~0.12 s of CPU per `infercrane replay` call here.
bytecode: $(STAMP)
	@echo "== bytecode of shared/infercrane (compileall, only what changed)"
	@$(PY) -m compileall -q shared/infercrane >/dev/null

# Debian's chromium opens the HTML report in the report tests (and takes the README screenshot).
browser:
	@command -v chromium >/dev/null 2>&1 || { S=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "== chromium (apt-get install; the report tests open the HTML report with it)"; \
	  $$S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq chromium; }

# checkov fails on any finding not suppressed in template.yaml itself, each suppression with its
# reason (`Metadata: checkov: skip: [{id, comment}]`); --skip-download keeps it offline.
validate: $(SAMSTAMP) $(CHECKOVSTAMP)
	$(SAMVENV)/bin/cfn-lint template.yaml
	$(SAMVENV)/bin/sam validate --lint --template template.yaml
	$(CHECKOVVENV)/bin/checkov --file template.yaml --framework cloudformation --skip-download \
	  --compact --quiet

lint: $(STAMP)
	$(VENV)/bin/ruff check shared functions tests

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# One pytest-xdist worker per core, each with its own moto server and local stack; loadscope keeps
# a module's tests on one worker so its module fixtures (a qualification run, a stack of its own)
# run once; --durations names the slowest tests, where the next cut in its time starts. docs/testing.md has the figures.
PYTEST := $(VENV)/bin/pytest -q -n auto --dist loadscope --no-loadscope-reorder --durations=15

# The installs first, one after another (the venvs, the artifacts, chromium); then the gates and
# the tests side by side: cfn-lint, sam validate and mypy (a minute of CPU on a fresh clone) run
# while pytest starts its workers and stacks, instead of before. Their few lines of output may
# land between pytest's; each job's failure still fails `make test`.
test: $(STAMP) $(SAMSTAMP) $(CHECKOVSTAMP) $(ARTIFACTS) browser
	$(MAKE) --no-print-directory -j4 validate lint typecheck test-all

# Every test of every tier, no gate (what `make test` runs beside the gates).
test-all: $(STAMP) $(ARTIFACTS) browser bytecode
	$(PYTEST) tests

test-fast: $(STAMP) browser bytecode
	$(PYTEST) tests/unit tests/integration

coverage: $(STAMP) $(ARTIFACTS) browser
	$(PYTEST) --cov --cov-report=term:skip-covered tests/unit tests/integration

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit
integration: $(STAMP) browser
	$(VENV)/bin/pytest -q tests/integration
e2e: $(STAMP) browser
	$(VENV)/bin/pytest -q tests/e2e

demo: $(STAMP) $(ARTIFACTS) bytecode
	$(VENV)/bin/infercrane local demo

# Qualification: never part of `make test` (the provider run touches real clouds).
qualify: $(STAMP) bytecode
	$(VENV)/bin/infercrane qualify --local

qualify-providers: $(STAMP)
	$(VENV)/bin/infercrane qualify --providers

# Not part of `make test`: prints one table of measured ratios, writes bench/results.json and
# regenerates the README's performance table from it (commit both together).
bench: $(STAMP) bytecode
	$(VENV)/bin/python bench/run.py
	$(VENV)/bin/python bench/readme_table.py --write

clean:
	rm -rf $(VENV) $(SAMVENV) $(CHECKOVVENV) .pytest_cache .mypy_cache .ruff_cache
