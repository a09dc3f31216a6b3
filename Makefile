# Two commands do all set-up on a fresh machine: `make demo` (only what the demo needs) and `make test`
# (everything the lint and the tests need, the browser included). Each set-up step prints one line; its own
# output goes to .delta_optimize/setup.log, printed only if it fails.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JARS_DIR := $(VENV)/share/dbt-delta-optimize/jars
MVN_DEP := org.apache.maven.plugins:maven-dependency-plugin:3.8.1
PYTEST_ARGS ?=
STEP := sh build-support/step.sh

.PHONY: setup demo-setup jars demo lint test bench clean

EXECUTOR_VENV := .venv-executor

# What the demo needs: the package with its runtime dependencies, Delta's jars, the bytecode.
demo-setup: $(VENV)/.runtime $(JARS_DIR)/.resolved bytecode

# Everything the lint and the tests need but the browser (the test target's): the test, docs and s3 extras
# (first: the runtime step is then skipped), Azurite, the executors' Python.
setup: $(VENV)/.installed demo-setup build-support/node_modules/.installed $(EXECUTOR_VENV)/.installed

$(VENV)/bin/python:
	@$(STEP) "python virtualenv ($(VENV))" $(PYTHON) -m venv $(VENV)
	@$(STEP) "" $(PY) -m pip install -q --upgrade pip

# The package and its runtime dependencies (the demo's); skipped when the full install below is current.
$(VENV)/.runtime: pyproject.toml | $(VENV)/bin/python
	@[ $(VENV)/.installed -nt pyproject.toml ] || \
	    $(STEP) "python packages (runtime)" $(PY) -m pip install -q -e . --config-settings editable_mode=compat
	@touch $@

# The same with the test, docs and s3 extras (lint and tests).
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	@$(STEP) "python packages (test, docs, s3 extras)" \
	    $(PY) -m pip install -q -e '.[test,docs,s3]' --config-settings editable_mode=compat
	@touch $@

# The package's bytecode, as pip writes it when it installs a wheel. An editable install has none, and where
# PYTHONDONTWRITEBYTECODE is set every fresh CLI process compiles what it imports (60 to 80 ms of a VACUUM).
# Files already compiled are skipped; Python recompiles (in memory) any source changed since.
.PHONY: bytecode
bytecode: $(VENV)/.runtime
	@$(STEP) "bytecode" $(PY) -m compileall -q dbt_delta_optimize

# Delta's jars from Maven Central into the venv (the Spark session factory finds them there).
$(JARS_DIR)/.resolved: build-support/delta-jars.pom.xml | $(VENV)/bin/python
	@rm -rf $(JARS_DIR) && mkdir -p $(JARS_DIR)
	@$(STEP) "Delta jars (Maven Central)" mvn -q -B -f build-support/delta-jars.pom.xml $(MVN_DEP):copy-dependencies \
	    -DincludeGroupIds=io.delta -DoutputDirectory=$(abspath $(JARS_DIR))
	@ls $(JARS_DIR)/delta-spark_*.jar >/dev/null
	@touch $@

jars: $(JARS_DIR)/.resolved

# A real browser for the project health page's test (Debian's chromium, headless); installed once, by `make test`.
.PHONY: browser
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	    $(STEP) "browser (chromium, for the project page's test)" sh -c \
	    'export DEBIAN_FRONTEND=noninteractive; { apt-get update -q && apt-get install -y -q chromium; } || \
	     { sudo -E apt-get update -q && sudo -E apt-get install -y -q chromium; }'

# The Python of the test cluster's executors: what a real cluster's executors have (pyarrow, numpy,
# pandas, pinned to the main venv's versions), but NOT this package, which the engine must ship.
$(EXECUTOR_VENV)/.installed: $(VENV)/.installed
	@rm -rf $(EXECUTOR_VENV)
	@$(STEP) "executors' python ($(EXECUTOR_VENV))" sh -c \
	    '$(PY) -m venv --without-pip $(EXECUTOR_VENV) || $(PYTHON) -m venv --without-pip $(EXECUTOR_VENV)'
	@$(STEP) "" $(PY) -m pip --python $(EXECUTOR_VENV)/bin/python install -q \
	    $$($(PY) -m pip list --format=freeze 2>/dev/null | grep -iE '^(pyarrow|numpy|pandas|python-dateutil|pytz|tzdata|six)==')
	@touch $@

# Azurite (the Azure Blob Storage emulator) from the npm registry, for the object-store tests.
build-support/node_modules/.installed: build-support/package.json build-support/package-lock.json
	@$(STEP) "azurite (npm)" npm ci --prefix build-support --no-audit --no-fund --loglevel=error
	@touch $@

demo: demo-setup
	@$(PY) integration_tests/demo.py

# Lint and type checks come first: a test run never starts on code that does not pass them.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: lint browser
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) bench/suite.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(EXECUTOR_VENV) .pytest_cache build *.egg-info
