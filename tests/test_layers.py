"""The layers of ARCHITECTURE.md, checked from the source: imports only go downwards."""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "dbt_delta_optimize"

#: layer -> packages it must never import (its own and lower layers are fine)
FORBIDDEN = {
    "delta": (
        "pyspark",
        "py4j",
        "dbt_delta_optimize.plan",
        "dbt_delta_optimize.inspect",
        "dbt_delta_optimize.engine",
        "dbt_delta_optimize.api",
        "dbt_delta_optimize.cli",
        "dbt_delta_optimize.dbt",
    ),
    "plan": (
        "pyspark",
        "py4j",
        "dbt_delta_optimize.inspect",
        "dbt_delta_optimize.engine",
        "dbt_delta_optimize.api",
        "dbt_delta_optimize.cli",
        "dbt_delta_optimize.dbt",
    ),
    "inspect": (
        "pyspark",
        "py4j",
        "dbt_delta_optimize.engine",
        "dbt_delta_optimize.api",
        "dbt_delta_optimize.cli",
        "dbt_delta_optimize.dbt",
    ),
    "engine": ("dbt_delta_optimize.api", "dbt_delta_optimize.cli", "dbt_delta_optimize.dbt"),
}


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute names of every module a file imports (relative imports resolved), lazy ones included."""
    module = "dbt_delta_optimize." + ".".join(path.relative_to(PKG).with_suffix("").parts)
    package = module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)
    return out


def _files(layer: str) -> list[pathlib.Path]:
    return sorted((PKG / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer):
    offenders = []
    for path in _files(layer):
        for name in _imports(path):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[layer]):
                offenders.append(f"{path.relative_to(PKG)} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_every_layer_exists_and_has_modules():
    for layer in ("delta", "plan", "inspect", "engine", "cli", "dbt"):
        assert len(_files(layer)) >= 2, layer


def test_modules_stay_short():
    long = [f"{p.relative_to(PKG)}: {n}" for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600]
    assert not long, long
