"""Real servers for the tests, started on 127.0.0.1 once per session: a moto S3 server (and helpers).

No mocks: the object-store code talks HTTP to a real S3 API implementation.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "EXECUTOR_PYTHON",
    "AzureServer",
    "ConnectServer",
    "S3Server",
    "StandaloneCluster",
    "ThriftServer",
    "azurite",
    "delta_confs",
    "free_port",
    "moto_s3",
    "spark_connect_server",
    "spark_home",
    "spark_standalone",
    "spark_thrift_server",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it answered")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except urllib.error.HTTPError:
            return  # it answers (an error status is still an answer)
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer on {url} within {timeout:.0f}s")


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def env(self) -> dict[str, str]:
        """The standard AWS environment variables for this server (what a user has set)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing-key-id",
            "AWS_SECRET_ACCESS_KEY": "testing-secret-value",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def new_bucket(self) -> str:
        """Create a bucket (S3 CreateBucket is a PUT on /bucket) and return its name."""
        name = f"ddo-{uuid.uuid4().hex[:12]}"
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=10).read()
        return name


@contextmanager
def moto_s3() -> Iterator[S3Server]:
    """A moto S3 server (``moto[server]``, installed by the set-up) on a free local port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_http(endpoint, proc, "moto_server")
        yield S3Server(endpoint)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


#: Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE_BIN = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build-support", "node_modules", ".bin", "azurite-blob"
)


@dataclass(frozen=True)
class AzureServer:
    url: str  #: http://127.0.0.1:PORT

    def env(self) -> dict[str, str]:
        """The standard Azure variables for the emulator (what a user of Azurite sets)."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": self.url,
            "AZURE_ALLOW_HTTP": "true",
        }

    def new_container(self) -> str:
        """Create a container (Blob REST API, Shared Key signed) and return its name."""
        name = f"ddo-{uuid.uuid4().hex[:12]}"
        date, version = email.utils.formatdate(usegmt=True), "2021-08-06"
        canonical = "\n".join(
            [
                "PUT",
                *[""] * 11,
                f"x-ms-date:{date}\nx-ms-version:{version}",
                f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container",
            ]
        )
        digest = hmac.new(base64.b64decode(AZURITE_KEY), canonical.encode(), hashlib.sha256).digest()
        headers = {
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(digest).decode()}",
        }
        url = f"{self.url}/{AZURITE_ACCOUNT}/{name}?restype=container"
        urllib.request.urlopen(urllib.request.Request(url, method="PUT", headers=headers), timeout=10).read()
        return name


@contextmanager
def azurite() -> Iterator[AzureServer]:
    """Azurite's blob service (npm, installed by `make setup`) on a free local port, in memory."""
    if not os.path.exists(AZURITE_BIN):
        raise RuntimeError(f"Azurite is not installed ({AZURITE_BIN}): run `make setup`.")
    port = free_port()
    proc = subprocess.Popen(
        [
            AZURITE_BIN,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--silent",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/{AZURITE_ACCOUNT}?comp=list", proc, "azurite-blob")
        yield AzureServer(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---------------------------------------------------------------------------- Spark: standalone cluster, Connect
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The executors' Python: pyarrow, numpy and pandas, but NOT this package (`make setup` builds it).
EXECUTOR_PYTHON = os.path.join(ROOT, ".venv-executor", "bin", "python")


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _spark_env(work: str) -> dict[str, str]:
    """An environment without this package on PYTHONPATH (executors must get it shipped), small daemons."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_REMOTE", "MASTER")}
    env.update(
        SPARK_HOME=spark_home(),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        SPARK_LOG_DIR=os.path.join(work, "logs"),
        SPARK_WORKER_DIR=os.path.join(work, "worker"),
        PYSPARK_PYTHON=EXECUTOR_PYTHON,
    )
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; its log: {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f}s; its log: {log}")


@dataclass(frozen=True)
class StandaloneCluster:
    master: str  #: spark://127.0.0.1:PORT
    env: dict[str, str]  #: the environment the daemons run with (no PYTHONPATH)


def _alive_workers(ui: str) -> int:
    """Workers the master's UI lists as ALIVE; 0 while it cannot say (not listening yet, or, while the
    master starts, an empty body: a JSONDecodeError failed the whole standalone fixture once in CI)."""
    import json

    try:
        state = json.loads(urllib.request.urlopen(f"{ui}/json/", timeout=2).read())
    except (OSError, ValueError):
        return 0
    if not isinstance(state, dict):
        return 0
    return sum(1 for w in state.get("workers", []) if isinstance(w, dict) and w.get("state") == "ALIVE")


@contextmanager
def spark_standalone(work: str, *, cores: int = 2, memory: str = "1g") -> Iterator[StandaloneCluster]:
    """A standalone master and one worker (``spark-class``, shipped with pyspark) on 127.0.0.1."""
    if not os.path.exists(EXECUTOR_PYTHON):
        raise RuntimeError(f"the executors' Python is missing ({EXECUTOR_PYTHON}): run `make setup`.")
    os.makedirs(work, exist_ok=True)
    env = _spark_env(work)
    os.makedirs(env["SPARK_LOG_DIR"], exist_ok=True)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    logs = [os.path.join(work, "master.log"), os.path.join(work, "worker.log")]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(logs[0], "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.master.Master",
                        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                )
            )
        _wait_port(port, procs[0], "the Spark master", logs[0])
        with open(logs[1], "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        master_url,
                        *("--host", "127.0.0.1", "--cores", str(cores), "--memory", memory),
                        *("--webui-port", str(worker_ui), "--work-dir", env["SPARK_WORKER_DIR"]),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                )
            )
        deadline = time.monotonic() + 120
        while _alive_workers(f"http://127.0.0.1:{ui}") < 1:
            if procs[1].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark worker did not register; its log: {logs[1]}")
            time.sleep(0.3)
        yield StandaloneCluster(master_url, env)
    finally:
        for proc in reversed(procs):
            _stop(proc)


def delta_confs() -> list[str]:
    """spark-submit arguments for Delta: its jars and the SQL extension and catalog."""
    from dbt_delta_optimize.engine.session import delta_jars

    jars = delta_jars()
    if not jars:
        raise RuntimeError("Delta's jars are missing: run `make setup`.")
    return [
        "--jars",
        ",".join(jars),
        "--conf",
        "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
        "--conf",
        "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "--conf",  # VACUUM's file listing in a few partitions, not 10,000 tasks (tests/conftest.py SMALL_LISTINGS)
        "spark.sql.sources.parallelPartitionDiscovery.parallelism=4",
    ]


@dataclass(frozen=True)
class ConnectServer:
    url: str  #: sc://127.0.0.1:PORT
    warehouse: str  #: spark.sql.warehouse.dir of the server's catalog


@contextmanager
def spark_connect_server(work: str, *, python: str = EXECUTOR_PYTHON) -> Iterator[ConnectServer]:
    """Spark Connect (``SparkConnectServer``, bundled with pyspark) with Delta, on 127.0.0.1.

    Its Python workers run ``python``: by default the executors' venv (no package), so what our tasks
    need is shipped as artifacts. The server runs in its own process group, stopped as a group.
    """
    if not os.path.exists(python):
        raise RuntimeError(f"the executors' Python is missing ({python}): run `make setup`.")
    os.makedirs(work, exist_ok=True)
    env = {**_spark_env(work), "SPARK_DAEMON_MEMORY": "1g", "PYSPARK_PYTHON": python}  # sized as a daemon
    port = free_port()
    warehouse = os.path.join(work, "warehouse")
    log = os.path.join(work, "connect.log")
    cmd = [
        os.path.join(spark_home(), "bin", "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--driver-memory",
        "1g",
        *delta_confs(),
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        f"spark.sql.warehouse.dir={warehouse}",
        "--conf",
        f"spark.driver.extraJavaOptions=-Dderby.system.home={work}",
        "--conf",
        f"spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={os.path.join(work, 'metastore_db')};create=true",
        "--conf",
        "spark.sql.catalogImplementation=hive",
        "--conf",
        f"spark.pyspark.python={python}",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    try:
        _wait_port(port, proc, "the Spark Connect server", log)
        yield ConnectServer(f"sc://127.0.0.1:{port}", warehouse)
    finally:
        _stop_group(proc)


# ---------------------------------------------------------------------------- Spark Thrift Server (HiveThriftServer2)
@dataclass(frozen=True)
class ThriftServer:
    host: str
    port: int
    warehouse: str  #: spark.sql.warehouse.dir of the server's catalog

    def query(self, statement: str) -> list[tuple]:
        """One statement through PyHive (what dbt-spark's thrift method uses); its rows."""
        from pyhive import hive

        conn = hive.connect(host=self.host, port=self.port, username="tests")
        try:
            cursor = conn.cursor()
            cursor.execute(statement)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            conn.close()


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server started in its own process group: the whole group (spark-submit and its JVM)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def spark_thrift_server(work: str) -> Iterator[ThriftServer]:
    """HiveThriftServer2 (``spark-hive-thriftserver_2.13``, bundled with pyspark) with Delta, on 127.0.0.1.

    Delta's jars go on ``--jars`` and ``--driver-class-path`` (the server's session loads the extension
    and the catalog at start). It runs in its own process group, stopped as a group.
    """
    from dbt_delta_optimize.engine.session import delta_jars

    jars = delta_jars()
    if not jars:
        raise RuntimeError("Delta's jars are missing: run `make setup`.")
    os.makedirs(work, exist_ok=True)
    env = {**_spark_env(work), "SPARK_DAEMON_MEMORY": "1g"}
    port = free_port()
    warehouse = os.path.join(work, "warehouse")
    log = os.path.join(work, "thrift.log")
    confs = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",  # VACUUM's listing: see delta_confs
        "spark.sql.warehouse.dir": warehouse,
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={work}",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={os.path.join(work, 'metastore_db')};create=true"
        ),
    }
    cmd = [
        os.path.join(spark_home(), "bin", "spark-submit"),
        *("--class", "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"),
        *("--master", "local[2]", "--driver-memory", "1g"),
        *("--jars", ",".join(jars), "--driver-class-path", os.pathsep.join(jars)),
        *(arg for k, v in confs.items() for arg in ("--conf", f"{k}={v}")),
        "spark-internal",
        *("--hiveconf", f"hive.server2.thrift.port={port}"),
        *("--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1"),
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    try:
        _wait_port(port, proc, "the Spark Thrift Server", log, timeout=240)
        yield ThriftServer("127.0.0.1", port, warehouse)
    finally:
        _stop_group(proc)
