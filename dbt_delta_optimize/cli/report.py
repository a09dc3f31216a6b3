"""What the writing commands print: a plan, a run's metrics, an auto-compaction decision (``--json`` aside)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .format import human_size, make_table, partition_label, print_table

if TYPE_CHECKING:
    from ..plan.autocompact import AutoCompactResult
    from ..plan.metrics import OptimizeMetrics
    from ..plan.planner import OptimizePlan

__all__ = ["print_auto_compact", "print_metrics", "print_plan"]


def print_plan(table_name: str, plan: OptimizePlan, show_files: bool) -> None:
    d = plan.summary(include_files=show_files)
    click.echo(
        f"plan for {table_name} at version {d['readVersion']}: {d['numBins']} bin(s) in {d['partitions']} "
        f"partition(s), {d['filesToRewrite']} of {d['consideredFiles']} file(s), {human_size(d['bytesToRewrite'])}, "
        f"{d['numBatches']} commit(s)"
    )
    if not d["partitionsToRewrite"]:
        click.echo("nothing to rewrite")
        return
    rows = [[p["partition"], str(p["bins"]), str(p["files"]), human_size(p["bytes"])] for p in d["partitionsToRewrite"]]
    print_table(
        make_table("partition", "bins", "files", "size", right=("bins", "files", "size")), rows, what="partition"
    )
    if show_files:
        files = [[partition_label(b["partitionValues"]), path] for b in d["bins"] for path in b["paths"]]
        print_table(make_table("partition", "file to rewrite"), files, limit=sys.maxsize)


def print_metrics(m: OptimizeMetrics) -> None:
    versions = ", ".join(map(str, m.committed_versions)) or "none (nothing to do)"
    click.echo(
        f"optimized {m.path}: {m.num_files_removed} file(s) -> {m.num_files_added} in {m.partitions_optimized} "
        f"partition(s), {m.num_bins} bin(s), {human_size(m.files_removed.total_size)} -> "
        f"{human_size(m.files_added.total_size)}, version(s) {versions}, "
        f"{(m.end_time_ms - m.start_time_ms) / 1000:.1f}s"
    )
    if m.partitions_skipped_already_clustered:
        click.echo(f"{m.partitions_skipped_already_clustered} partition(s) already clustered (use --full to redo)")
    if m.num_bins_left:
        click.echo(f"time budget spent: {m.num_bins_left} bin(s), {human_size(m.num_bytes_left)} left for the next run")
    for d in m.dropped_bins:
        click.echo(
            f"dropped {partition_label(d['partition'])}: {d['files']} file(s), changed by version "
            f"{d['winningVersion']} ({d['reason']})"
        )
    for f in m.failed_bins:
        click.echo(f"failed {partition_label(f['partition'])}: {f['files']} file(s): {f['error']}", err=True)


def print_auto_compact(result: AutoCompactResult) -> None:
    click.echo(
        f"auto-compact {result.table}: {result.status}: {result.reason} (decided in {result.decision_ms:.0f} ms)"
    )
    if result.considered:
        rows = [
            [partition_label(p.partition), str(p.small_files), str(p.files), "yes" if p in result.chosen else ""]
            for p in result.considered
        ]
        out = make_table("partition", "small files", "files", "compacted", right=("small files", "files"))
        print_table(out, rows, what="partition")
    m = result.metrics
    if m is not None:
        versions = ", ".join(map(str, m.committed_versions)) or "none"
        click.echo(
            f"compacted {m.num_files_removed} file(s) -> {m.num_files_added}, {human_size(m.files_removed.total_size)}"
            f" -> {human_size(m.files_added.total_size)}, version(s) {versions}"
        )
