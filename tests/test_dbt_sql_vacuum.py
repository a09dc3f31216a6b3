"""``run-operation vacuum`` over dbt's SQL connection: the statement and the retention check (no server).

The thrift test sends the real statement; here a connection that records what it is asked shows what is
sent, and that a short retention is refused before anything but SHOW TBLPROPERTIES reaches the server.
"""

from __future__ import annotations

import pytest

from dbt_delta_optimize.dbt.sql_vacuum import vacuum_args, vacuum_over_sql, vacuum_statement
from dbt_delta_optimize.errors import InvalidArgumentError, InvalidConfigError


class Conn:
    def __init__(self, retention: str | None, listed: tuple[str, ...] = ()) -> None:
        self.sent: list[str] = []
        self.retention = retention
        self.listed = listed

    def rows(self, statement: str) -> list[dict]:
        self.sent.append(statement)
        if statement.startswith("SHOW TBLPROPERTIES"):
            props = {"delta.minReaderVersion": "1"}
            if self.retention is not None:
                props["delta.deletedFileRetentionDuration"] = self.retention
            return [{"key": k, "value": v} for k, v in props.items()]
        return [{"path": p} for p in self.listed]


def test_the_statement_rounds_hours_up_and_names_lite_and_dry_run():
    assert vacuum_statement("s.t", retain_ms=0, lite=False, dry_run=False) == "VACUUM `s`.`t` RETAIN 0 HOURS"
    assert vacuum_statement("s.t", retain_ms=90 * 60_000, lite=True, dry_run=True) == (
        "VACUUM `s`.`t` LITE RETAIN 2 HOURS DRY RUN"
    )


def test_the_tables_retention_is_the_default_and_a_shorter_one_needs_the_opt_in():
    conn = Conn("interval 2 days", ("/wh/t/a.parquet",))
    record: dict = {}
    vacuum_over_sql(conn, record, "s.t", vacuum_args(None, "full", False), dry_run=True)
    assert conn.sent[-1] == "VACUUM `s`.`t` RETAIN 48 HOURS DRY RUN"
    assert record["status"] == "planned" and record["plan"] == {"filesDeleted": 1, "files": ["/wh/t/a.parquet"]}

    conn = Conn(None)
    with pytest.raises(InvalidArgumentError, match="shorter than"):
        vacuum_over_sql(conn, {}, "s.t", vacuum_args("1d", "full", False), dry_run=False)
    assert conn.sent == ["SHOW TBLPROPERTIES `s`.`t`"]  # nothing else was sent
    vacuum_over_sql(conn, {}, "s.t", vacuum_args(0, "lite", True), dry_run=False)
    assert conn.sent[-1] == "VACUUM `s`.`t` LITE RETAIN 0 HOURS"


@pytest.mark.parametrize(
    ("retain", "mode", "allow", "message"),
    [("soon", "full", False, "retain"), (None, "fast", False, "mode"), (None, "full", "yes", "allow_short")],
)
def test_bad_arguments_name_the_fix(retain, mode, allow, message):
    with pytest.raises(InvalidArgumentError, match=message):
        vacuum_args(retain, mode, allow)


def test_a_bad_table_property_is_a_config_error():
    with pytest.raises(InvalidConfigError, match="deletedFileRetentionDuration"):
        vacuum_over_sql(Conn("forever"), {}, "s.t", vacuum_args(None, "full", False), dry_run=True)
