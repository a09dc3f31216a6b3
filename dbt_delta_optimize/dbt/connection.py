"""Which engine the dbt hooks use, for every dbt-spark connection method.

The method is read from dbt's adapter (``adapter.config.credentials.method``): dbt's ``target``
context holds only the credentials' connection keys (host, port, cluster, endpoint, schema,
organization), so ``target.method`` is never there.

* ``method: session`` runs dbt's SQL in a SparkSession in the dbt process: the hooks use that same
  session (a Spark Connect one when ``SPARK_REMOTE`` is set, as PySpark's builder decides).
* ``thrift``, ``http`` and ``odbc`` only send SQL to a server. With a Spark Connect address
  (``$SPARK_REMOTE`` or the dbt var ``delta_optimize_spark_remote``) the hooks open a Connect session
  to the cluster, which takes precedence; otherwise they decide from our log reader (or ``DESCRIBE
  DETAIL``) and run ``OPTIMIZE`` / ``REORG`` through dbt's own connection (``sql_engine``). They never
  start a local JVM there: it would have neither the cluster's data nor Delta.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .sql_engine import SqlConnection

__all__ = ["REMOTE_VAR", "Engine", "SparkTarget", "adapter_method"]

#: The dbt var that names a Spark Connect server (``sc://host:port``) for the hooks.
REMOTE_VAR = "delta_optimize_spark_remote"

#: spark: dbt's own session; connect: a Spark Connect session; sql: dbt's connection; none: nothing usable.
Engine = Literal["spark", "connect", "sql", "none"]


def adapter_method(adapter: Any) -> str | None:
    """dbt-spark's connection method from the adapter's credentials (``SparkConnectionMethod`` is a StrEnum);
    another adapter type (one without ``method``, e.g. databricks) is named by its type."""
    if adapter is None:
        return None
    try:
        credentials = adapter.config.credentials
    except AttributeError:
        return None
    method = getattr(credentials, "method", None)
    if method is None:
        kind = getattr(credentials, "type", None)
        return str(kind).lower() if kind else None
    return str(getattr(method, "value", method)).lower()


@dataclass(frozen=True)
class SparkTarget:
    """dbt's connection method, the Spark Connect address the hooks may use, and dbt's adapter."""

    method: str = "session"
    remote: str | None = None
    #: the Jinja ``adapter``: its ``execute`` runs SQL on the thread's dbt connection
    adapter: Any = field(default=None, compare=False, repr=False)
    #: over SQL, whether to read the table's log from the dbt host (the var ``delta_optimize_read_log``)
    read_log: bool = True

    @classmethod
    def parse(cls, value: Any) -> SparkTarget:
        """From the macros' ``{'adapter': adapter, 'remote': var(...)}`` (None: a session, as before).

        An explicit ``method`` key wins over the adapter's (callers outside dbt's Jinja).
        """
        if not isinstance(value, Mapping):
            return cls(remote=os.environ.get("SPARK_REMOTE") or None)
        adapter = value.get("adapter")
        method = str(value.get("method") or adapter_method(adapter) or "session").lower()
        remote = value.get("remote") or os.environ.get("SPARK_REMOTE") or None
        read_log = value.get("read_log") not in (False, "false", "False", 0, "0")
        return cls(method=method, remote=str(remote) if remote else None, adapter=adapter, read_log=read_log)

    @property
    def engine(self) -> Engine:
        if self.method == "session":
            return "connect" if os.environ.get("SPARK_REMOTE") else "spark"
        if self.remote is not None:
            return "connect"
        return "sql" if self.adapter is not None else "none"

    @property
    def usable(self) -> bool:
        """Whether the hooks can act: dbt's session, a Spark Connect one, or dbt's SQL connection."""
        return self.engine != "none"

    @property
    def uses_session(self) -> bool:
        """Whether the work runs on a Spark session (dbt's or Connect) rather than through SQL."""
        return self.engine in ("spark", "connect")

    def describe(self) -> str:
        """One line on what the hooks will use, for ``run-operation delta_optimize_engine`` and the logs."""
        if self.engine == "spark":
            return "dbt-spark method 'session': the hooks run in dbt's own Spark session"
        if self.engine == "connect":
            where = self.remote or os.environ.get("SPARK_REMOTE")
            return f"dbt-spark method '{self.method}': the hooks run on the Spark Connect server {where}"
        if self.engine == "sql":
            return (
                f"dbt-spark method '{self.method}': the hooks decide from the table's log (or DESCRIBE DETAIL) and "
                f"run OPTIMIZE through dbt's connection; set the var {REMOTE_VAR} (sc://host:15002) to use Spark "
                "Connect instead"
            )
        return self.skip_reason()

    def skip_reason(self) -> str:
        return (
            f"dbt-spark method '{self.method}' sends SQL to a server and no dbt connection was handed to "
            f"delta_optimize: set SPARK_REMOTE=sc://host:15002 (or the dbt var {REMOTE_VAR}) to run it through "
            "Spark Connect"
        )

    def sql_connection(self) -> SqlConnection:
        """dbt's own connection, for the SQL engine (``engine == "sql"``)."""
        from .sql_engine import SqlConnection

        return SqlConnection(self.adapter, self.method, read_log=self.read_log)

    def session(self) -> Any:
        """The session to use (never a new local JVM for a server method)."""
        if self.method != "session":
            from ..engine.session import connect_session

            if self.remote is None:
                raise RuntimeError(self.skip_reason())
            return connect_session(self.remote)
        from pyspark.sql import SparkSession

        from ..engine.session import use_this_python

        # dbt's own session (PySpark's builder makes it a Connect one under SPARK_REMOTE); the var is for
        # server methods only: a Connect session beside dbt's classic one would switch PySpark's mode.
        session = SparkSession.builder.getOrCreate()
        use_this_python(session)
        return session
