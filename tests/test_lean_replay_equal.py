"""Our own replay (``delta/lean_replay.py``) against deltalake's path, on every snapshot of a set of tests.

From ``LEAN_REPLAY_ROWS`` checkpoint rows on, ``load_snapshot`` reads the live files, protocol and metadata
itself instead of asking deltalake. The tests below are those of the snapshot, file table, planner, hostile
log, V2 checkpoint, deletion vector and row tracking modules (imported: each runs again here), with the
threshold at 0, so every table goes through our replay; and every snapshot our replay gives is compared,
field by field, with the one deltalake's path gives for the same version. A log deltalake refuses must be
refused by ours too (it then falls back to deltalake's path, which reports it as before).
"""

from __future__ import annotations

import json

import pytest

from dbt_delta_optimize.delta import snapshot as snapshot_module
from dbt_delta_optimize.delta.checkpoint_adds import add_type
from dbt_delta_optimize.errors import DeltaOptimizeError
from tests.test_file_table import (
    checkpointed,
    test_a_live_list_the_replay_does_not_give_falls_back_to_lookup,
    test_from_files_round_trips_and_sorts_by_path,
    test_replay_after_a_checkpoint_matches_deltalake,
)
from tests.test_hostile_log import (
    test_add_path_escaping_the_root_is_refused_naming_path_and_version,
    test_bad_json_is_a_corrupt_log_naming_the_version,
    test_catalog_managed_table_is_unsupported,
    test_copy_of_a_healthy_table_still_loads,
    test_external_paths_even_when_allowed_stay_in_the_tables_store,
    test_gap_in_versions_is_a_corrupt_log_naming_the_missing_commit,
    test_invalid_protocol_is_refused,
    test_missing_metadata_is_a_corrupt_log,
    test_reader_version_4_is_unsupported_not_a_kernel_error,
    test_version_out_of_range_names_the_range,
)
from tests.test_planner import (
    table,
    test_a_lone_dv_file_is_a_candidate_by_its_ratio,
    test_auto_compaction_counts_small_files_by_live_bytes,
    test_files_are_built_only_when_read,
    test_health_layout_reads_the_same_table,
    test_partitions_of_paths,
    test_purge_rewrites_every_file_with_deleted_rows_and_records_a_reorg,
    test_the_snapshots_slow_path_plans_like_the_replay,
    test_zorder_plans_one_bin_per_partition,
)
from tests.test_row_tracking import (
    test_new_files_get_fresh_row_ids_commit_version_mark_and_ict,
    test_rebase_over_an_append_reassigns_row_ids_version_and_ict,
    test_supported_but_not_enabled_and_suspended,
    test_validation_passes_our_commit,
)
from tests.test_snapshot import (
    test_empty_log_is_not_a_delta_table,
    test_snapshot_of_deltars_table_with_special_partitions,
    test_tags_and_stats_round_trip,
)
from tests.test_v2_checkpoint import test_delta_spark_v2_checkpoints_with_sidecars_feed_our_readers

__all__ = [
    "checkpointed",
    "table",
    "test_a_live_list_the_replay_does_not_give_falls_back_to_lookup",
    "test_a_lone_dv_file_is_a_candidate_by_its_ratio",
    "test_add_path_escaping_the_root_is_refused_naming_path_and_version",
    "test_auto_compaction_counts_small_files_by_live_bytes",
    "test_bad_json_is_a_corrupt_log_naming_the_version",
    "test_catalog_managed_table_is_unsupported",
    "test_copy_of_a_healthy_table_still_loads",
    "test_delta_spark_v2_checkpoints_with_sidecars_feed_our_readers",
    "test_empty_log_is_not_a_delta_table",
    "test_external_paths_even_when_allowed_stay_in_the_tables_store",
    "test_files_are_built_only_when_read",
    "test_from_files_round_trips_and_sorts_by_path",
    "test_gap_in_versions_is_a_corrupt_log_naming_the_missing_commit",
    "test_health_layout_reads_the_same_table",
    "test_invalid_protocol_is_refused",
    "test_missing_metadata_is_a_corrupt_log",
    "test_new_files_get_fresh_row_ids_commit_version_mark_and_ict",
    "test_partitions_of_paths",
    "test_purge_rewrites_every_file_with_deleted_rows_and_records_a_reorg",
    "test_reader_version_4_is_unsupported_not_a_kernel_error",
    "test_rebase_over_an_append_reassigns_row_ids_version_and_ict",
    "test_replay_after_a_checkpoint_matches_deltalake",
    "test_snapshot_of_deltars_table_with_special_partitions",
    "test_supported_but_not_enabled_and_suspended",
    "test_tags_and_stats_round_trip",
    "test_the_snapshots_slow_path_plans_like_the_replay",
    "test_validation_passes_our_commit",
    "test_version_out_of_range_names_the_range",
    "test_zorder_plans_one_bin_per_partition",
]

#: Snapshots our replay gave (and were compared) over this module's tests.
_COMPARED: list[str] = []


def _described(snap: snapshot_module.Snapshot) -> dict[str, object]:
    """Everything a snapshot says, as plain values (every add field, read through the FileTable)."""
    t = snap.file_table
    columns = {f.name: t.column(f.name).to_pylist() for f in add_type()} if len(t) else {}
    meta = snap.metadata
    return {
        "version": snap.version,
        "protocol": snap.protocol,
        "schema": json.loads(meta.schema_string),
        "metadata": (meta.id, meta.partition_columns, dict(meta.configuration), meta.created_time),
        "columns": columns,
        "versions": t.versions.to_pylist() if len(t) else [],
        "files": list(snap.files),
    }


@pytest.fixture(autouse=True)
def lean_everywhere(monkeypatch):
    """Threshold 0: every load tries our replay; each snapshot it gives is checked against deltalake's."""
    lean = snapshot_module._lean_snapshot

    def checked(cache, version):
        ours = lean(cache, version)
        if ours is None:
            return None
        root, storage = cache.root, cache.storage
        monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 2**62)
        try:
            theirs = snapshot_module.load_snapshot(root, ours.version, storage=storage)
        except DeltaOptimizeError as exc:
            pytest.fail(f"our replay read {root} at {ours.version}, which deltalake's path refuses: {exc}")
        finally:
            monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 0)
        assert _described(ours) == _described(theirs)
        _COMPARED.append(root)
        return ours

    monkeypatch.setattr(snapshot_module, "LEAN_REPLAY_ROWS", 0)
    monkeypatch.setattr(snapshot_module, "_lean_snapshot", checked)


def test_zz_the_replay_was_compared_on_many_snapshots():
    """Runs last (file order): the tests above did go through our replay."""
    if len(_COMPARED) < 20:
        pytest.skip("run alone: the comparisons happen in the other tests of this module")
    assert len(set(_COMPARED)) >= 10  # tables (several snapshots of some)
