# The two set-up commands of this project: `make demo` and `make test`.
# Both create .venv from requirements.lock (pinned, so installs are reproducible)
# the first time, and reuse it after. Bytecode is compiled at install: many Airflow
# deployments set PYTHONDONTWRITEBYTECODE, and without it every task would recompile
# its imports.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
UV_VERSION := 0.13.8
SHARED_TABLES ?= $(abspath ../shared/delta-tables)
PYTEST_ARGS ?=
# Delta Lake on Spark, the tests' reference oracle (scripts/setup_delta_oracle.sh): its own
# venv and jars under .cache/, fetched once (PyPI, Maven Central), reused offline after.
DELTA_STAMP := .cache/delta-jars/.installed-stamp

.PHONY: demo demo-fleet test test-setup lint bench clean delta-oracle browser

# The browser tests (tests/browser.py) drive Debian's Chromium with Playwright; Playwright's
# own browser downloads are never used. Installed once with apt-get when missing (as root);
# otherwise the run stops here and says what to install.
CHROMIUM := /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser tests (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "$(CHROMIUM) is missing: the browser tests need Debian's chromium; run 'apt-get install chromium' as root (or make test as root)" >&2; \
		exit 1; \
	fi

# uv first, on its own: the product's install and the Delta oracle's both use it, and
# `make test` runs those two side by side (they download and compile independently).
UV := $(BIN)/uv
$(UV):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# PySpark and pyspark-client are published as source only. uv builds them again on every
# install here (the index's answers are not cacheable, so its cache never hits: minutes and
# 2.5 GB of cache each time), while pip keeps the wheels it builds. So pip builds them once
# into .cache/wheels, and both venvs (the product's and the Delta oracle's) install from there.
WHEELHOUSE := $(CURDIR)/.cache/wheels
PYSPARK_VERSION := $(shell sed -n 's/^pyspark==//p' requirements.lock)
PYSPARK_WHEEL := $(WHEELHOUSE)/pyspark-$(PYSPARK_VERSION)-py2.py3-none-any.whl
$(PYSPARK_WHEEL): requirements.lock $(UV)
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w $(WHEELHOUSE) \
		pyspark==$(PYSPARK_VERSION) pyspark-client==$(PYSPARK_VERSION)

$(STAMP): requirements.lock pyproject.toml $(UV) $(PYSPARK_WHEEL)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --find-links $(WHEELHOUSE) -r requirements.lock
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q airflow_delta  # the editable package's own sources
	touch $(STAMP)

# The demo: a local table with small files and deletion vectors under .demo/, the nightly
# maintenance DAG on it with `airflow dags test` (OPTIMIZE on Spark local mode) while a
# writer appends, then the health before and after (scripts/demo.py says what it does).
demo: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH PYTHONPATH=$(CURDIR) $(BIN)/python -m scripts.demo --dir .demo

$(DELTA_STAMP): $(UV) $(PYSPARK_WHEEL) requirements.lock scripts/setup_delta_oracle.sh
	WHEELHOUSE=$(WHEELHOUSE) scripts/setup_delta_oracle.sh

delta-oracle: $(DELTA_STAMP)

# The fleet demo: six local tables with different needs under .demo-fleet/, the
# delta_fleet_maintenance DAG (health, plan, mapped OPTIMIZE/VACUUM/CHECKPOINT), the history.
demo-fleet: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH PYTHONPATH=$(CURDIR) $(BIN)/python -m scripts.demo_fleet --dir .demo-fleet

# Azurite (the Azure tests' server) from npm, once, into .cache/ (tests/object_store_helpers.py).
AZURITE := .cache/azurite-$(shell sed -n 's/^AZURITE_VERSION = "\(.*\)"/\1/p' tests/object_store_helpers.py)/node_modules/.bin/azurite-blob
$(AZURITE): $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python -c "from tests.object_store_helpers import install_azurite; install_azurite()"

# The set-up steps are independent once uv is there: run them side by side.
test-setup: $(STAMP) $(DELTA_STAMP) $(AZURITE) browser

test:
	$(MAKE) --no-print-directory -j3 test-setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	DELTA_SHARED_TABLES=$(SHARED_TABLES) DELTA_TEST_ARTIFACTS=$(CURDIR)/.cache/test-artifacts $(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .cache/delta-venv .cache/delta-jars .cache/wheels
