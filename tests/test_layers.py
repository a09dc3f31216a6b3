"""The layers of ARCHITECTURE.md, checked from the source: imports only go downwards, no import circles,
no private name imported from another module. Lazy (in-function) and type-checking imports count too."""

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
    "tasks": ("pyspark", "py4j"),  # code that runs inside Spark tasks: plain Python and Arrow
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


# ----------------------------------------------------------------------------- the import graph
#: Each layer's rank: a module may import its own layer and layers of a lower rank, nothing else (peers
#: of one rank do not import each other). The package root is the top: no module imports it.
RANK = {
    "_version": 0,
    "errors": 0,
    "process_exit": 0,
    "no_pandas": 0,
    "arrow_kernels": 0,
    "options": 1,
    "delta": 2,
    "plan": 3,
    "inspect": 4,
    "tasks": 5,
    "engine": 6,
    "ops": 7,
    "api": 8,
    "purge": 8,
    "cli": 9,
    "dbt": 9,
    "": 10,
}

#: KNOWN EXCEPTIONS: none are left. An entry would be (importing module, imported module or name) -> why;
#: the check fails on an entry that no longer matches, so this list can only shrink.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module(path: pathlib.Path) -> str:
    """The module's name below the package ("" for the root, "plan.config", ...)."""
    parts = path.relative_to(PKG).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PKG.rglob("*.py")}


def _edges(name: str) -> list[tuple[str, str | None]]:
    """(imported module, imported name if it is not a module) of every package import in one module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [
                (a.name.removeprefix("dbt_delta_optimize").lstrip("."), None)
                for a in node.names
                if a.name.split(".")[0] == "dbt_delta_optimize"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "dbt_delta_optimize":
                base = (node.module or "").removeprefix("dbt_delta_optimize").lstrip(".")
            else:
                continue
            for a in node.names:
                sub = f"{base}.{a.name}".lstrip(".")
                out.append((sub, None) if sub in MODULES else (base, a.name))
    return out


def _layer(name: str) -> str:
    return name.split(".")[0]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        targets = {t for t, _ in _edges(name) if t in MODULES and t != name}
        graph[name] = {t for t in targets if (name, t) not in KNOWN_EXCEPTIONS}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_ranked_layer():
    assert {_layer(m) for m in MODULES} <= set(RANK), {_layer(m) for m in MODULES} - set(RANK)


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_no_upward_imports_and_none_of_the_package_root():
    upward = []
    for name, targets in _graph().items():
        for target in targets:
            lower = RANK[_layer(target)] < RANK[_layer(name)]
            if target == "" or not (_layer(target) == _layer(name) or lower):
                upward.append(f"{name or 'dbt_delta_optimize'} imports {target or 'the package root'}")
    assert not upward, "\n".join(sorted(upward))


def test_no_private_name_is_imported_from_another_module():
    private = []
    for name in MODULES:
        for module, imported in _edges(name):
            is_private = bool(imported) and imported.startswith("_") and not imported.startswith("__")
            if is_private and module != name and (name, f"{module}.{imported}") not in KNOWN_EXCEPTIONS:
                private.append(f"{name} imports {module}.{imported}")
    assert not private, "\n".join(sorted(private))


def test_known_exceptions_still_exist():
    """An exception whose import is gone must be removed from KNOWN_EXCEPTIONS (the list only shrinks)."""
    present = set()
    for name in MODULES:
        for module, imported in _edges(name):
            present.add((name, module))
            if imported:
                present.add((name, f"{module}.{imported}"))
    stale = [f"{a} -> {b or 'the package root'}" for a, b in KNOWN_EXCEPTIONS if (a, b) not in present]
    assert not stale, "remove from KNOWN_EXCEPTIONS: " + ", ".join(stale)
