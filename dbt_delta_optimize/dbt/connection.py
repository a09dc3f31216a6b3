"""Which Spark session the dbt hooks use, for every dbt-spark connection method.

``method: session`` runs dbt's SQL in a SparkSession in the dbt process: the hooks use that same
session (a Spark Connect one when ``SPARK_REMOTE`` is set, as PySpark's builder decides). With
``thrift``, ``http`` and ``odbc`` dbt only sends SQL to a server; our work needs a session, so the
hooks open a Spark Connect session to the cluster when one is configured (``$SPARK_REMOTE`` or the
dbt var ``delta_optimize_spark_remote``), and otherwise skip, saying how to enable them. They never
start a local JVM there: it would have neither the cluster's data nor Delta.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["REMOTE_VAR", "SparkTarget"]

#: The dbt var that names a Spark Connect server (``sc://host:port``) for the hooks.
REMOTE_VAR = "delta_optimize_spark_remote"


@dataclass(frozen=True)
class SparkTarget:
    """dbt's connection method and the Spark Connect address the hooks may use."""

    method: str = "session"
    remote: str | None = None

    @classmethod
    def parse(cls, value: Any) -> SparkTarget:
        """From the macros' ``{'method': target.method, 'remote': var(...)}`` (None: a session, as before)."""
        if not isinstance(value, Mapping):
            return cls(remote=os.environ.get("SPARK_REMOTE") or None)
        method = str(value.get("method") or "session").lower()
        remote = value.get("remote") or os.environ.get("SPARK_REMOTE") or None
        return cls(method=method, remote=str(remote) if remote else None)

    @property
    def usable(self) -> bool:
        """Whether the hooks can get a session: dbt's own, or a Spark Connect one."""
        return self.method == "session" or self.remote is not None

    def skip_reason(self) -> str:
        return (
            f"dbt-spark method '{self.method}' sends SQL to a server, and delta_optimize needs a Spark session: "
            f"set SPARK_REMOTE=sc://host:15002 (or the dbt var {REMOTE_VAR}) to run it through Spark Connect"
        )

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
