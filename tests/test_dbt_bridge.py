"""The dbt bridge relies on dbt internals (plugin discovery, get_context_modules): fail loudly if they move."""

from __future__ import annotations

import json

import pytest


def test_dbt_discovers_our_plugin_and_it_subclasses_dbtplugin():
    from dbt.plugins.manager import PluginManager, dbtPlugin

    modules = PluginManager.get_prefixed_modules()
    assert "dbt_delta_optimize" in modules, "dbt no longer discovers top-level dbt_* modules (or the install hides us)"
    plugins = getattr(modules["dbt_delta_optimize"], PluginManager.PLUGIN_ATTR_NAME)
    assert plugins and all(issubclass(p, dbtPlugin) for p in plugins)
    manager = PluginManager.from_modules("some_project")
    assert any(type(p).__name__ == "DeltaOptimizePlugin" for p in manager._plugins)


def test_install_adds_the_namespace_once_and_keeps_dbts_modules():
    import dbt.context.base as base

    from dbt_delta_optimize.dbt.bridge import NAMESPACE, install

    install()
    first = base.get_context_modules
    install()  # idempotent: no double wrapping
    assert base.get_context_modules is first
    modules = base.get_context_modules()
    assert {"pytz", "datetime", "re", "itertools"} <= set(modules)
    assert set(modules[NAMESPACE]) == {"record_version", "run_model", "run_operation"}


def test_modules_context_property_reads_the_wrapped_function():
    """dbt's `modules` context property must look get_context_modules up at call time."""
    import inspect

    import dbt.context.base as base

    src = inspect.getsource(
        base.BaseContext.modules.fget if hasattr(base.BaseContext.modules, "fget") else base.BaseContext
    )
    assert "get_context_modules()" in src


@pytest.mark.parametrize(
    "settings,needle",
    [
        ({"mode": "sometimes"}, "mode must be one of"),
        ({"on_error": "explode"}, "on_error must be warn or fail"),
        ({"zorder_by": 3}, "zorder_by must be a string or a list"),
        ({"min_files": 3}, "Unknown meta.delta_optimize setting"),
    ],
)
def test_invalid_model_settings_fail_softly_with_a_clear_message(tmp_path, monkeypatch, settings, needle):
    from dbt_delta_optimize.dbt import bridge as dbt_bridge

    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path))
    result = dbt_bridge.run_model("s.t", settings, model="m")
    assert result["status"] == "failed" and needle in result["error"]
    assert json.loads((tmp_path / "delta_optimize_results.json").read_text())[-1]["error"] == result["error"]


def test_skip_and_non_delta_are_skipped_without_touching_spark(tmp_path, monkeypatch):
    from dbt_delta_optimize.dbt import bridge as dbt_bridge

    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path))
    monkeypatch.setattr(dbt_bridge, "_spark", lambda: pytest.fail("Spark must not be needed to skip"))
    assert dbt_bridge.run_model("s.t", {"skip": True})["status"] == "skipped"
    assert dbt_bridge.run_model("s.t", {"mode": "never"})["status"] == "skipped"
    r = dbt_bridge.run_model("s.t", {}, file_format="parquet")
    assert r["status"] == "skipped" and "parquet" in r["line"]
