# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JARS_DIR := $(VENV)/share/dbt-delta-optimize/jars
MVN_DEP := org.apache.maven.plugins:maven-dependency-plugin:3.8.1
PYTEST_ARGS ?=

.PHONY: setup jars demo lint test bench clean

EXECUTOR_VENV := .venv-executor

setup: $(VENV)/.installed $(JARS_DIR)/.resolved build-support/node_modules/.installed $(EXECUTOR_VENV)/.installed browser bytecode

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[test,docs,s3]' --config-settings editable_mode=compat
	touch $@

# The package's bytecode, as pip writes it when it installs a wheel. An editable install has none, and where
# PYTHONDONTWRITEBYTECODE is set every fresh CLI process compiles what it imports (60 to 80 ms of a VACUUM).
# Files already compiled are skipped; Python recompiles (in memory) any source changed since.
.PHONY: bytecode
bytecode: $(VENV)/.installed
	$(PY) -m compileall -q dbt_delta_optimize

# Delta's jars from Maven Central into the venv (the Spark session factory finds them there).
$(JARS_DIR)/.resolved: build-support/delta-jars.pom.xml | $(VENV)/bin/python
	rm -rf $(JARS_DIR) && mkdir -p $(JARS_DIR)
	mvn -q -B -f build-support/delta-jars.pom.xml $(MVN_DEP):copy-dependencies \
	    -DincludeGroupIds=io.delta -DoutputDirectory=$(abspath $(JARS_DIR))
	ls $(JARS_DIR)/delta-spark_*.jar >/dev/null
	touch $@

jars: $(JARS_DIR)/.resolved

# A real browser for the project health page's test (Debian's chromium, headless); installed once.
.PHONY: browser
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	    { apt-get update -q && apt-get install -y -q chromium; } || \
	    { sudo apt-get update -q && sudo apt-get install -y -q chromium; }

# The Python of the test cluster's executors: what a real cluster's executors have (pyarrow, numpy,
# pandas, pinned to the main venv's versions), but NOT this package, which the engine must ship.
$(EXECUTOR_VENV)/.installed: $(VENV)/.installed
	rm -rf $(EXECUTOR_VENV)
	$(PY) -m venv --without-pip $(EXECUTOR_VENV) || $(PYTHON) -m venv --without-pip $(EXECUTOR_VENV)
	$(PY) -m pip --python $(EXECUTOR_VENV)/bin/python install -q \
	    $$($(PY) -m pip list --format=freeze 2>/dev/null | grep -iE '^(pyarrow|numpy|pandas|python-dateutil|pytz|tzdata|six)==')
	touch $@

# Azurite (the Azure Blob Storage emulator) from the npm registry, for the object-store tests.
build-support/node_modules/.installed: build-support/package.json build-support/package-lock.json
	npm ci --prefix build-support --no-audit --no-fund --loglevel=error
	touch $@

demo: setup
	$(PY) integration_tests/demo.py

# Lint and type checks come first: a test run never starts on code that does not pass them.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) bench/suite.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(EXECUTOR_VENV) .pytest_cache build *.egg-info
