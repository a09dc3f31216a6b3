"""Where Spark sessions come from: the session factory, conf access and catalog-name resolution.

Only ``engine/`` imports pyspark, always inside functions, so ``import dbt_delta_optimize`` stays
cheap (dbt imports every ``dbt_*`` module on each run) and ``delta/``, ``plan/``, ``inspect/`` and
``tasks/`` never load it.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    DeltaOptimizeError,
    InvalidArgumentError,
    NotADeltaTableError,
    SparkConnectError,
    SparkStartError,
    TableNotFoundError,
)
from ..no_pandas import unblock as unblock_pandas
from .jars import DELTA_JVM_VERSION, cached_jars, default_home, delta_artifact, resolve_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_JVM_VERSION",
    "REMOTE_ENV",
    "catalog_start_reason",
    "conf_getter",
    "connect_session",
    "delta_jars",
    "delta_maven_coordinate",
    "embedded_conf_is_default",
    "embedded_parallelism",
    "embedded_work_dir",
    "get_spark",
    "is_path",
    "resolve_table",
    "use_this_python",
]

log = logging.getLogger(__name__)

JARS_ENV = "DBT_DELTA_OPTIMIZE_JARS"
#: PySpark's own variable for a Spark Connect address (``sc://host:port``).
REMOTE_ENV = "SPARK_REMOTE"


#: A quiet log4j2 configuration (errors only) for the embedded session's JVM.
_QUIET_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")


def default_jars_dir() -> str:
    """Where ``make setup`` puts Delta's jars: inside the virtualenv, next to pyspark."""
    return os.path.join(sys.prefix, "share", "dbt-delta-optimize", "jars")


def delta_jars() -> list[str]:
    """Jar files for Delta: $DBT_DELTA_OPTIMIZE_JARS (dir or comma list), else the venv's jar dir
    (``make setup``), else the user cache a pip-only install resolved (``dbt-delta-optimize jars``)."""
    env = os.environ.get(JARS_ENV)
    if env:
        jars: list[str] = []
        for c in (p for p in env.split(",") if p):
            jars.extend(sorted(glob.glob(os.path.join(c, "*.jar"))) if os.path.isdir(c) else [c])
        return jars
    return sorted(glob.glob(os.path.join(default_jars_dir(), "*.jar"))) or cached_jars()


def delta_maven_coordinate() -> str:
    return delta_artifact().coordinate


def embedded_parallelism() -> int:
    """``spark.default.parallelism`` of the embedded session (what its metrics report, started or not)."""
    return max(2, os.cpu_count() or 2)


def embedded_conf_is_default() -> bool:
    """Whether a new embedded session would have only our confs: no ``spark-defaults.conf`` (in
    ``$SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``) and no ``PYSPARK_SUBMIT_ARGS`` could set others.

    Then what it would answer (settings, time zone, parallelism) is known without starting it.
    """
    if os.environ.get("PYSPARK_SUBMIT_ARGS"):
        return False
    folders = [os.environ.get("SPARK_CONF_DIR")]
    home = os.environ.get("SPARK_HOME")
    if home is None:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")  # pip's pyspark: SPARK_HOME is the package folder
        home = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    folders.append(os.path.join(home, "conf") if home else None)
    return not any(folder and os.path.exists(os.path.join(folder, "spark-defaults.conf")) for folder in folders)


def embedded_work_dir() -> str:
    """The embedded session's folder: its warehouse (``spark-warehouse``) and its Derby metastore (``metastore_db``)."""
    return os.path.join(default_home(), "spark")


def _hive_site() -> str | None:
    """A ``hive-site.xml`` the embedded session would read (it may name a remote metastore)."""
    folders = [os.environ.get(v) for v in ("SPARK_CONF_DIR", "HIVE_CONF_DIR", "HADOOP_CONF_DIR")]
    home = os.environ.get("SPARK_HOME")
    folders.append(os.path.join(home, "conf") if home else None)
    found = (os.path.join(f, "hive-site.xml") for f in folders if f)
    return next((p for p in found if os.path.exists(p)), None)


def catalog_start_reason(table: str) -> str:
    """Why a new embedded session must start to resolve the catalog name ``table``, in a few words.

    Raises TableNotFoundError, without a JVM, when that session's catalog cannot hold the name: no
    configuration could point it elsewhere (no ``spark-defaults.conf``, ``PYSPARK_SUBMIT_ARGS`` or
    ``hive-site.xml``), and its local metastore does not exist (no table was ever registered there),
    or the name is in a catalog other than the session catalog. Call it only when no session runs.
    """
    _quote_name(table)
    if not embedded_conf_is_default():
        return "spark-defaults.conf or PYSPARK_SUBMIT_ARGS configures the session"
    hive_site = _hive_site()
    if hive_site is not None:
        return f"the metastore of {hive_site}"
    parts = [p.strip("`") for p in table.split(".")]
    metastore = os.path.join(embedded_work_dir(), "metastore_db")
    where = "Pass the table's path, or run with the session or Spark Connect server (--remote) whose catalog has it"
    if len(parts) == 3 and parts[0].lower() != "spark_catalog":
        raise TableNotFoundError(
            f"Table '{table}' was not found: no catalog '{parts[0]}' is configured and no Spark session runs. {where}."
        )
    if not os.path.isdir(metastore):
        raise TableNotFoundError(
            f"Table '{table}' was not found: no catalog is configured, no Spark session runs, and the local "
            f"metastore ({metastore}) does not exist. {where}."
        )
    return f"local metastore at {metastore}"


def _log_confs(work_dir: str, *, quiet: bool) -> dict[str, str]:
    """JVM and Python-worker logging of the embedded session: quiet (our log4j2 file for the driver and every
    executor, no faulthandler dumps from Python workers), or Spark's own defaults and worker dumps (--debug).

    A failed task reaches the caller as an error we report in one line; the executor's and the scheduler's
    log lines and stacks about it would only repeat it.
    """
    log4j = (
        f"-Dlog4j2.configurationFile={_QUIET_LOG4J} -Dlog4j2.disable.jmx=true" if quiet else "-Dlog4j2.disable.jmx=true"
    )
    dumps = "false" if quiet else "true"
    return {
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={work_dir} {log4j}",
        "spark.executor.extraJavaOptions": log4j,
        "spark.python.worker.faulthandler.enabled": dumps,
        "spark.sql.execution.pyspark.udf.faulthandler.enabled": dumps,
    }


def quiet_logs() -> bool:
    """Whether Spark's own logs stay quiet: unless our logger shows debug records (the CLI's --debug)."""
    return not logging.getLogger("dbt_delta_optimize").isEnabledFor(logging.DEBUG)


def session_conf(
    work_dir: str, *, catalog: str = "hive", shuffle_partitions: int = 4, quiet: bool = True
) -> dict[str, str]:
    """Static and runtime confs of the embedded session (Delta extension + catalog, small local settings)."""
    os.makedirs(work_dir, exist_ok=True)
    jars = delta_jars() or _resolved_jars()
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(embedded_parallelism()),
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.warehouse.dir": os.path.join(work_dir, "spark-warehouse"),
        **_log_confs(work_dir, quiet=quiet),
        "spark.sql.catalogImplementation": catalog,
        "spark.pyspark.python": sys.executable,
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={os.path.join(work_dir, 'metastore_db')};create=true",
    }
    if jars:
        conf["spark.jars"] = ",".join(jars)
    else:
        log.warning("No Delta jars could be resolved; asking Spark to resolve %s itself.", delta_maven_coordinate())
        conf["spark.jars.packages"] = delta_maven_coordinate()
    return conf


def _resolved_jars() -> list[str]:
    """No jars configured or installed: resolve them into the user cache (a pip-only install)."""
    try:
        return resolve_jars()
    except DeltaOptimizeError as exc:
        log.warning("%s", exc)
        return []


def get_spark(
    spark: SparkSession | None = None,
    *,
    work_dir: str | None = None,
    master: str = "local[*]",
    app_name: str = "dbt-delta-optimize",
    catalog: str = "hive",
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> SparkSession:
    """Return the session to use: the one handed in, else the running one (dbt's), else a new embedded one.

    ``remote`` (or ``$SPARK_REMOTE``), an ``sc://host:port`` address, gives a Spark Connect session
    instead of the embedded one; no local JVM is started then.
    """
    if spark is not None:
        return spark
    url = remote or os.environ.get(REMOTE_ENV)
    if url:
        return connect_session(url)
    unblock_pandas()  # the CLI refused pandas to its process: Spark needs it
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:  # dbt runs nodes in threads with no active session
        return SparkSession.builder.getOrCreate()
    builder = SparkSession.builder.master(master).appName(app_name)
    quiet = quiet_logs()
    for k, v in {
        **session_conf(work_dir or embedded_work_dir(), catalog=catalog, quiet=quiet),
        **(conf or {}),
    }.items():
        builder = builder.config(k, v)
    _check_java()
    from pyspark.errors import PySparkRuntimeError

    try:
        session = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise SparkStartError(
            "the embedded Spark session could not start: its JVM exited at once. Check that Java 17 runs "
            "(java -version, JAVA_HOME), or run with --debug to see its output."
        ) from exc
    if quiet:
        session.sparkContext.setLogLevel("ERROR")
    use_this_python(session)
    return session


def _check_java() -> None:
    """Refuse in one line, before launching anything, when the embedded session's Java is missing, does
    not run, or is older than Spark 4's Java 17 (spark-class would print its own lines, then exit)."""
    import shutil

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not (java and os.access(java, os.X_OK)):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH and JAVA_HOME is not set"
        raise SparkStartError(
            f"the embedded Spark session needs Java 17, and {where}. Install Java 17 and set JAVA_HOME to it "
            "(compaction alone needs no Java: Z-order, liquid clustering and --rewrite-engine spark do)."
        )
    problem = _java_problem(java)
    if problem is not None:
        raise SparkStartError(
            f"the embedded Spark session needs Java 17 or later, and {java} {problem}. "
            "Set JAVA_HOME to a Java 17 installation."
        )


def _java_problem(java: str) -> str | None:
    """What is wrong with ``java -version`` (None: it runs, and is 17 or later, or says no version)."""
    import re
    import subprocess

    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return None  # a slow machine, not a broken Java: let Spark try
    except OSError as exc:
        return f"cannot be run ({exc.strerror or exc})"
    said = (done.stderr + done.stdout).strip()
    if done.returncode != 0:
        lines = [ln for ln in said.splitlines() if not ln.startswith("Picked up ")]
        return f"exits with {done.returncode}" + (f" ({lines[0].strip()[:200]})" if lines else "")
    found = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    if found is None:
        return None
    major = int(found.group(2) or 0) if found.group(1) == "1" else int(found.group(1))  # "1.8.0" is Java 8
    return None if major >= 17 else f"is Java {major}"


def connect_session(url: str) -> SparkSession:
    """A Spark Connect session to ``url`` (``sc://host:port``), checked to answer; a clear error if not."""
    if not url.startswith("sc://"):
        raise SparkConnectError(
            f"'{url}' is not a Spark Connect address: write sc://host:port (as in --remote or SPARK_REMOTE)."
        )
    _check_reachable(url)
    unblock_pandas()  # the CLI refused pandas to its process: the Connect client needs it
    try:
        import pyspark.sql.connect.session  # noqa: F401 - checks the client's packages (grpcio, ...)
    except ImportError as exc:
        raise SparkConnectError(
            f"Spark Connect needs the client packages of pyspark[connect] ({str(exc).strip().splitlines()[0]}): "
            "pip install 'pyspark[connect]'."
        ) from exc
    from pyspark.sql import SparkSession

    # Through the classic builder: it also switches pyspark.sql.functions to Connect for this process.
    session = SparkSession.builder.remote(url).getOrCreate()
    try:
        session.version  # noqa: B018 - one round trip: is there a server?
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkConnectError(
            f"cannot reach the Spark Connect server at {url}: {first}. "
            "Check the address (--remote / SPARK_REMOTE) and that the server runs.",
            retryable=True,
        ) from exc
    return session


def _check_reachable(url: str, timeout: float = 10.0) -> None:
    """Fail fast when nothing listens at the address (the Connect client retries for minutes)."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(url.split(";", 1)[0].rstrip("/"))
    host = parsed.hostname or "localhost"
    try:
        port = parsed.port or 15002
    except ValueError as exc:
        raise SparkConnectError(f"'{url}' has an invalid port: write sc://host:port.") from exc
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise SparkConnectError(
            f"cannot reach the Spark Connect server at {url}: {exc.strerror or exc}. "
            "Check the address (--remote / SPARK_REMOTE) and that the server runs.",
            retryable=True,
        ) from exc


def use_this_python(session: SparkSession) -> None:
    """Local Spark's Python workers run this interpreter (pyarrow, this package), not ``python3`` on PATH.

    PySpark takes the worker interpreter from ``$PYSPARK_PYTHON`` when the context starts, else
    ``python3``. Instead of changing the process environment (dbt's, a notebook's) the context's
    own setting is pointed here: only for a local master, and only when nobody chose one.
    """
    try:
        sc = session.sparkContext
    except Exception:  # Spark Connect: no local context, nothing to point
        return
    if "PYSPARK_PYTHON" in os.environ or getattr(sc, "pythonExec", None) != "python3":
        return
    if str(sc.master).startswith("local"):
        sc.pythonExec = sys.executable


def conf_getter(spark: SparkSession) -> Callable[[str], str | None]:
    """A ``key -> str | None`` view of the session's runtime conf."""

    def get(key: str) -> str | None:
        value = spark.conf.get(key, None)
        return value if value not in (None, "") else None

    return get


def is_path(table: str) -> bool:
    """A table argument is a path if it looks like one; otherwise it is a catalog name."""
    return (
        "/" in table
        or "\\" in table
        or table.startswith((".", "~", "file:"))
        or "://" in table
        or os.path.exists(table)
    )


def resolve_table(table: str, spark: SparkSession | None = None) -> str:
    """Location of a table given as a path or a catalog name (names need a Spark session)."""
    if is_path(table):
        return table
    if spark is None:
        raise InvalidArgumentError(
            f"'{table}' looks like a catalog table name; resolving it needs a Spark session. "
            "Pass a path instead, or call with a SparkSession."
        )
    quoted = _quote_name(table)
    fast = _session_catalog_lookup(table, spark)
    if fast is not None:
        provider, location = fast
        if provider == "view":
            raise NotADeltaTableError(f"'{table}' is a view, not a Delta table. Optimize the table it reads instead.")
        if provider != "delta":
            raise NotADeltaTableError(
                f"'{table}' is a {provider} table, not Delta. Only Delta tables can be optimized."
            )
        return location
    from pyspark.errors import AnalysisException

    try:
        row = spark.sql(f"DESCRIBE DETAIL {quoted}").collect()[0].asDict()
    except AnalysisException as exc:
        msg = str(exc)
        if "TABLE_OR_VIEW_NOT_FOUND" in msg or "not found" in msg.lower():
            raise TableNotFoundError(
                f"Table '{table}' was not found in the catalog. Check the name (schema.table)."
            ) from exc
        raise NotADeltaTableError(f"'{table}' is not a Delta table: {msg.splitlines()[0]}") from exc
    if (row.get("format") or "").lower() != "delta":
        raise NotADeltaTableError(
            f"'{table}' is a {row.get('format')} table, not Delta. Only Delta tables can be optimized."
        )
    return str(row["location"])


def _session_catalog_lookup(table: str, spark: SparkSession) -> tuple[str, str] | None:
    """(provider, location) from the session catalog's metadata, without loading the Delta log.

    ``DESCRIBE DETAIL`` replays the table's log in the JVM (hundreds of ms a call); a dbt post-hook
    asks for the location of every model, so the metastore entry is read directly when the session
    is a classic one with a session catalog. Returns None (caller falls back to DESCRIBE DETAIL) for
    anything else: Spark Connect, other catalogs, path-based entries without a location.
    """
    parts = [p.strip("`") for p in table.split(".")]
    if len(parts) == 3 and parts[0].lower() == "spark_catalog":
        parts = parts[1:]  # the session catalog's three-part name
    if len(parts) > 2:
        return None
    from .python_tasks import is_connect

    if is_connect(spark):
        return None
    try:
        session: Any = spark  # py4j handles: classic sessions only (Connect falls back below)
        jvm = session._jvm
        catalog = session._jsparkSession.sessionState().catalog()
        db = jvm.scala.Option.apply(parts[0] if len(parts) == 2 else None)
        ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier(parts[-1], db)
        if not catalog.tableExists(ident):
            if catalog.isTempView(ident):
                return None
            raise TableNotFoundError(f"Table '{table}' was not found in the catalog. Check the name (schema.table).")
        meta = catalog.getTableMetadata(ident)
        kind = meta.tableType().name().lower()
        if kind == "view":
            return ("view", "")
        provider = meta.provider().get().lower() if meta.provider().isDefined() else "hive"
        location = meta.storage().locationUri()
        if not location.isDefined():
            return None
        return provider, str(location.get().toString())
    except TableNotFoundError:
        raise
    except Exception:  # py4j/Connect differences: use the portable path
        log.debug("session catalog lookup of %s failed; using DESCRIBE DETAIL", table, exc_info=True)
        return None


def _quote_name(name: str) -> str:
    parts = name.split(".")
    for p in parts:
        if not p or not all(ch.isalnum() or ch == "_" for ch in p.strip("`")):
            raise InvalidArgumentError(
                f"'{name}' is not a valid table name: use schema.table with letters, digits and underscores."
            )
    return ".".join(f"`{p.strip('`')}`" for p in parts)
