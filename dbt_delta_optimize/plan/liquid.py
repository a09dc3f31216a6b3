"""Liquid clustering (the ``clustering`` table feature), pure: the table's clustering columns and
delta-spark's incremental file selection.

delta-spark (OptimizeTableStrategy's ClusteringStrategy) clusters a clustered table by the columns
of its ``delta.clustering`` domain along a Hilbert curve. Each OPTIMIZE writes one ZCube (tagged
``ZCUBE_ID`` and ``ZCUBE_ZORDER_BY``, ``clusteringProvider: liquid``); a later run leaves alone
ZCubes of at least ``minCubeSize`` bytes, and a lone ZCube when nothing new arrived. Files clustered
by other columns are left alone unless FULL. Clustered tables are never partitioned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..delta.actions import AddFile, Protocol
from ..delta.file_table import FileView
from ..delta.snapshot import Snapshot
from ..errors import InvalidArgumentError, InvalidConfigError
from .config import ConfGetter, OptimizeConfig
from .curve import ClusteringSpec, clustering_spec
from .operation import Liquid
from .planner import Bin, OptimizePlan, batches_of, next_fit

__all__ = [
    "CLUSTERING_DOMAIN",
    "LIQUID_PROVIDER",
    "ZCUBE_ID",
    "ZCUBE_ZORDER_BY",
    "build_liquid_plan",
    "clustering_columns",
    "is_clustered_table",
    "liquid_spec",
    "select_liquid_files",
]

CLUSTERING_DOMAIN = "delta.clustering"
LIQUID_PROVIDER = "liquid"
ZCUBE_ID = "ZCUBE_ID"
ZCUBE_ZORDER_BY = "ZCUBE_ZORDER_BY"
_MIN_CUBE_KEY = "spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.threshold"
_TARGET_CUBE_KEY = "spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.targetCubeSize"
_MIN_CUBE_DEFAULT = 100 * 1024**3  # 100 x optimize.maxFileSize's default


def is_clustered_table(protocol: Protocol) -> bool:
    """delta-spark's ClusteredTableUtils.isSupported: the ``clustering`` writer feature."""
    return "clustering" in (protocol.writer_features or ())


def _logical_name(schema: Mapping[str, Any], physical: Sequence[str]) -> str:
    """ClusteringColumnInfo.logicalName: walk physical name parts (column mapping) to the logical names."""
    fields = schema.get("fields", [])
    parts: list[str] = []
    for part in physical:
        match = next(
            (f for f in fields if (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"]) == part),
            None,
        ) or next((f for f in fields if f["name"].lower() == part.lower()), None)
        if match is None:
            raise InvalidArgumentError(
                f"Clustering column {'.'.join(physical)!r} (delta.clustering domain) is not in the table schema. "
                "Run ALTER TABLE ... CLUSTER BY to repair the table's clustering columns."
            )
        parts.append(match["name"])
        t = match["type"]
        fields = t.get("fields", []) if isinstance(t, dict) else []
    return ".".join(f"`{p}`" if "." in p or "`" in p else p for p in parts)


def clustering_columns(snapshot: Snapshot) -> list[str]:
    """The logical clustering columns (as DESCRIBE DETAIL lists them), or [] if none are set."""
    domain = snapshot.domains.get(CLUSTERING_DOMAIN)
    if domain is None:
        return []
    physical = domain.config.get("clusteringColumns") or []
    return [_logical_name(snapshot.schema, [str(p) for p in path]) for path in physical]


def _size_conf(get_conf: ConfGetter, key: str, default: int) -> int:
    raw = get_conf(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidConfigError(f"{key} must be a whole number of bytes, got {raw!r}.") from None


def _zcube(f: AddFile) -> tuple[str, list[str]] | None:
    """ZCubeInfo.getForFile: (id, clustering columns) when both tags are present."""
    zid, by = f.tags.get(ZCUBE_ID), f.tags.get(ZCUBE_ZORDER_BY)
    if zid is None or by is None:
        return None
    try:
        cols = json.loads(by)
    except ValueError:
        return None
    return zid, [str(c) for c in cols] if isinstance(cols, list) else []


def select_liquid_files(
    files: Sequence[AddFile], columns: Sequence[str], *, full: bool, min_cube_size: int
) -> list[AddFile]:
    """ClusteringStrategy.applyMinZCube: the files an OPTIMIZE of a clustered table rewrites."""
    ordered = sorted(files, key=lambda f: (f.tags.get(ZCUBE_ID) is not None, f.tags.get(ZCUBE_ID) or "", f.path))
    candidates: list[AddFile] = []
    foreign: list[AddFile] = []
    for f in ordered:
        info = _zcube(f)
        same_provider = f.clustering_provider in (None, LIQUID_PROVIDER)
        if same_provider and (info is None or info[1] == list(columns)):
            candidates.append(f)
        else:
            foreign.append(f)
    cube_size: dict[str, int] = {}
    for f in candidates:
        if (info := _zcube(f)) is not None:
            cube_size[info[0]] = cube_size.get(info[0], 0) + f.size
    small = [f for f in candidates if (info := _zcube(f)) is None or cube_size[info[0]] < min_cube_size]
    if full and foreign:
        return small + foreign
    cubes = {info[0] for f in small if (info := _zcube(f)) is not None}
    unclustered = any(_zcube(f) is None for f in small)
    if not unclustered and len(cubes) <= 1:  # ZCube.filterOutSingleZCubes: a lone ZCube stays
        return []
    return small


def liquid_spec(snapshot: Snapshot, columns: Sequence[str], get_conf: ConfGetter) -> ClusteringSpec:
    """The Hilbert clustering of a clustered table (one column: a range sort, as delta-spark)."""
    spec = clustering_spec(
        list(columns),
        "hilbert",
        schema=snapshot.schema,
        partition_columns=snapshot.partition_columns,
        configuration=snapshot.configuration,
        get_conf=get_conf,
    )
    return replace(spec, liquid=True)


def build_liquid_plan(
    snapshot: Snapshot, config: OptimizeConfig, spec: ClusteringSpec, *, full: bool, get_conf: ConfGetter
) -> OptimizePlan:
    """Plan an OPTIMIZE of a clustered table: the selected files packed into ZCubes of targetCubeSize."""
    min_cube = _size_conf(get_conf, _MIN_CUBE_KEY, _MIN_CUBE_DEFAULT)
    target = _size_conf(get_conf, _TARGET_CUBE_KEY, int(min_cube * 1.5))
    table = snapshot.file_table
    considered = FileView(table)
    columns = spec.column_names
    chosen = select_liquid_files(considered, columns, full=full, min_cube_size=min_cube)
    row_of = {p: r for r, p in enumerate(table.paths)}
    rows = sorted((f.size, row_of[f.path]) for f in chosen)  # by size, then path (rows are in path order)
    packed = next_fit([s for s, _ in rows], [r for _, r in rows], max(target, min_cube))
    bins = tuple(Bin({}, FileView(table, r, total_size=n)) for r, n in packed if r)
    return OptimizePlan(
        read_version=snapshot.version,
        operation=Liquid(tuple(columns), spec, full),
        config=config,
        considered_files=considered,
        bins=bins,
        batches=batches_of(bins, config),
    )
