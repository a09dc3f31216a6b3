"""Every setting is declared once (``dbt_delta_optimize.options``): the API, the CLI, the dbt meta keys,
the resolved configs and the settings page list exactly the declared options. Pure: no Spark."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re

import pytest
from click.testing import CliRunner

from dbt_delta_optimize.api import auto_compact, optimize, plan_optimize, plan_purge, purge
from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.dbt.settings import SETTINGS, ModelSettings, parse_settings
from dbt_delta_optimize.errors import InvalidConfigError
from dbt_delta_optimize.ops.arguments import settings_of
from dbt_delta_optimize.options import (
    ANALYZE_OPTIONS,
    AUTO_COMPACT_OPTIONS,
    OPTIMIZE_OPTIONS,
    PURGE_FIXED,
    VACUUM_MODEL_OPTIONS,
    VACUUM_OPTIONS,
    OptimizeOptions,
    options_table_markdown,
)
from dbt_delta_optimize.plan.autocompact import AutoCompactConfig
from dbt_delta_optimize.plan.config import OptimizeConfig

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
OPTIMIZE = [o.name for o in OPTIMIZE_OPTIONS]
PURGE = [n for n in OPTIMIZE if n not in PURGE_FIXED]
AUTO = [o.name for o in AUTO_COMPACT_OPTIONS]


def test_optimize_options_has_one_field_per_declared_option_in_order():
    assert [f.name for f in dataclasses.fields(OptimizeOptions)] == OPTIMIZE


def test_resolved_configs_are_the_declaration():
    expected = [n for o in OPTIMIZE_OPTIONS for n in (o.targets or (o.name,))]
    assert sorted(f.name for f in dataclasses.fields(OptimizeConfig)) == sorted(expected)
    config = OptimizeConfig()
    for o in OPTIMIZE_OPTIONS:
        if not o.targets:
            assert getattr(config, o.name) == o.default, o.name
    assert OptimizeConfig.resolve() == config  # nothing set: every default
    assert [f.name for f in dataclasses.fields(AutoCompactConfig)] == AUTO
    assert AutoCompactConfig() == AutoCompactConfig.resolve()
    assert [getattr(AutoCompactConfig(), n) for n in AUTO] == [o.default for o in AUTO_COMPACT_OPTIONS]


def test_session_conf_keys_are_the_declared_ones():
    conf = {o.conf: "2" for o in OPTIMIZE_OPTIONS if o.kind == "count"}
    config = OptimizeConfig.resolve(conf.get)
    assert all(getattr(config, o.name) == 2 for o in OPTIMIZE_OPTIONS if o.kind == "count")
    with pytest.raises(InvalidConfigError, match=re.escape(OPTIMIZE_OPTIONS[2].conf)):
        OptimizeConfig.resolve({OPTIMIZE_OPTIONS[2].conf: "zero"}.get)


def test_api_keywords_are_the_declared_options():
    assert settings_of(optimize) == OPTIMIZE and settings_of(plan_optimize) == OPTIMIZE
    assert settings_of(purge) == PURGE
    params = inspect.signature(auto_compact).parameters
    assert [n for n in params if n in AUTO] == AUTO
    for fn in (optimize, plan_optimize, purge, auto_compact):
        for name in [*settings_of(fn), *(n for n in params if n in AUTO and fn is auto_compact)]:
            p = inspect.signature(fn).parameters[name]
            assert p.kind is p.KEYWORD_ONLY and p.default is None, (fn.__name__, name)
    assert "where" in inspect.signature(plan_purge).parameters


def test_an_unknown_keyword_is_an_error_and_a_bad_value_fails_before_any_read(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="max_thread"):
        plan_optimize(None, missing, max_thread=2)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        purge(None, missing, min_file_size=1)  # type: ignore[call-overload]  # a purge fixes it
    with pytest.raises(InvalidConfigError, match="row_group_copy_min_bytes"):
        plan_optimize(None, missing, row_group_copy_min_bytes="lots")
    with pytest.raises(InvalidConfigError, match="max_threads"):
        plan_optimize(None, missing, options=OptimizeOptions(max_threads=0))


def _flags(command: str) -> set[str]:
    r = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    return set(re.findall(r"--[a-z][a-z-]*", r.output))


@pytest.mark.parametrize("command,names", [("optimize", OPTIMIZE), ("purge", PURGE), ("auto-compact", AUTO)], ids=str)
def test_every_setting_has_a_cli_flag_with_its_default(command, names):
    flags = _flags(command)
    assert {"--" + n.replace("_", "-") for n in names} <= flags
    declared = {o.name for o in (*OPTIMIZE_OPTIONS, *AUTO_COMPACT_OPTIONS)}
    extra = {f for f in flags if f[2:].replace("-", "_") in declared} - {"--" + n.replace("_", "-") for n in names}
    assert not extra, extra
    r = CliRunner().invoke(cli, [command, "--help"], terminal_width=400)
    options = AUTO_COMPACT_OPTIONS if command == "auto-compact" else OPTIMIZE_OPTIONS
    for o in options:
        if o.name in names:
            assert f"[default: {o.default_text()}]" in r.output, o.name


def test_cli_flags_reach_the_options(tmp_path):
    from dbt_delta_optimize.cli.settings import optimize_options

    ctx_values = {"max_threads": 3, "validate_commits": False, "order": None, "commit_every": "5m"}
    assert optimize_options(ctx_values) == OptimizeOptions(max_threads=3, validate_commits=False, commit_every="5m")
    r = CliRunner().invoke(cli, ["optimize", str(tmp_path), "--row-group-copy-min-bytes", "1.5m"])
    assert r.exit_code == 2 and "--row-group-copy-min-bytes" in r.stderr


def test_dbt_meta_keys_are_the_model_keys_and_the_declared_ones():
    model = {"mode", "where", "zorder_by", "curve", "on_error", "skip", "storage_options", "liquid_clustered_by"}
    declared = {o.meta_key for o in (*OPTIMIZE_OPTIONS, *AUTO_COMPACT_OPTIONS, *VACUUM_MODEL_OPTIONS) if o.meta_key}
    assert set(SETTINGS) == model | declared and set(OPTIMIZE) <= declared and "min_num_files" in declared
    assert (
        "vacuum_lite_every" in declared and parse_settings({"vacuum_lite_every": "1w"}).vacuum_lite_every == 604_800_000
    )
    s = parse_settings({"max_threads": "4", "allow_external_paths": True, "row_group_copy_min_bytes": "0"})
    assert s.options == OptimizeOptions(max_threads=4, allow_external_paths=True, row_group_copy_min_bytes=0)
    assert parse_settings({}) == ModelSettings()


def _settings_page_table() -> str:
    """The settings table as the docs site shows it: docs/settings.md through its MkDocs hook."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("options_hook", DOCS / "hooks" / "options.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (DOCS / "settings.md").read_text()
    assert hook.MARKER in page
    rendered = hook.on_page_markdown(page, None)
    start = page.index(hook.MARKER)
    return rendered[start : len(rendered) - (len(page) - start - len(hook.MARKER))]


def test_settings_page_table_is_generated_from_the_declaration():
    assert _settings_page_table() == options_table_markdown()


def test_settings_page_lists_the_same_options():
    block = _settings_page_table()
    optimize_part, rest = block.split("**Auto compaction**")
    auto_part, rest = rest.split("**VACUUM**")
    vacuum_part, rest = rest.split("**VACUUM after a model's write**")
    model_part, analyze_part = rest.split("**ANALYZE**")
    rows = lambda part: re.findall(r"^\| `([a-z_]+)`", part, re.M)  # noqa: E731
    assert rows(optimize_part) == OPTIMIZE and rows(auto_part) == AUTO
    assert rows(vacuum_part) == [o.name for o in VACUUM_OPTIONS]
    assert rows(model_part) == [o.name for o in VACUUM_MODEL_OPTIONS] and "(dbt only)" in model_part
    assert rows(analyze_part) == [o.name for o in ANALYZE_OPTIONS]
    for o in (*OPTIMIZE_OPTIONS, *AUTO_COMPACT_OPTIONS, *VACUUM_OPTIONS, *ANALYZE_OPTIONS):
        assert f"`{o.conf}`" in block and o.flag in block
    assert all(f"`{o.conf}`" in model_part for o in VACUUM_MODEL_OPTIONS)
