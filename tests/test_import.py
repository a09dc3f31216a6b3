"""dbt imports every dbt_* module on each invocation: our import must stay cheap and side-effect free."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_import_does_not_load_heavy_libraries():
    """What keeps the import cheap is what it loads (timing it would be a timed assertion: bench/ only)."""
    heavy = ("pyspark", "deltalake", "pyarrow", "numpy", "pandas", "click", "rich", "obstore", "jinja2", "sqlglot")
    code = "import json, sys; import dbt_delta_optimize; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules = set(json.loads(out))
    assert sorted(m for m in heavy if m in modules) == [], "heavy modules imported at package import"
    # nothing of ours but the version: the public names load on first use (PEP 562 __getattr__)
    assert sorted(m for m in modules if m.startswith("dbt_delta_optimize")) == [
        "dbt_delta_optimize",
        "dbt_delta_optimize._version",
    ]


def test_lazy_attributes_resolve():
    import dbt_delta_optimize as ddo

    assert ddo.OptimizeConfig().max_threads == 15
    assert sorted(ddo.__all__) == ddo.__all__
    for name in ddo.__all__:
        assert getattr(ddo, name) is not None


def test_demo_finds_the_integration_project():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "demo", os.path.join(os.path.dirname(__file__), "..", "integration_tests", "demo.py")
    )
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    assert os.path.isfile(os.path.join(demo.PROJECT, "dbt_project.yml")), demo.PROJECT


def test_embedded_session_leaves_pyspark_python_alone(spark):
    """The workers run this interpreter, set on the context, not through the process environment."""
    assert "PYSPARK_PYTHON" not in os.environ
    assert spark.sparkContext.pythonExec == sys.executable
    assert spark.sparkContext.parallelize([1], 1).map(lambda _: __import__("sys").executable).collect() == [
        sys.executable
    ]


def test_errors_module_is_an_attribute_right_after_import():
    code = "import dbt_delta_optimize as d; print(d.errors.DeltaOptimizeError.__name__, d.errors.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["DeltaOptimizeError", "dbt_delta_optimize.errors"]
