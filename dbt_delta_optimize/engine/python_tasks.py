"""Python code in Spark tasks on any cluster: ship this package to the executors, run one task, say where it ran.

The Arrow rewrite and the object-store readers and writers run our code inside Spark tasks. On a
local session the Python workers are this interpreter, with this package installed; on a cluster
they are some other Python, which usually has pyarrow but not this package. So before the first
task this package is shipped as a zip, the way Spark ships any Python dependency: ``addPyFile``
on a classic session, ``addArtifacts(pyfile=True)`` on Spark Connect. The zip is built from the
running package's own files, so executors run exactly the driver's code (never an older copy
installed there), and it is named by the hash of its content, so repeated calls add nothing new.

Tasks themselves are run by ``task_runner`` (one job per batch of bins).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

__all__ = [
    "SHIPPED_KEY",
    "SHIP_KEY",
    "is_connect",
    "needs_package",
    "package_zip",
    "ship_package",
]

#: ``auto`` (default): ship unless the tasks run in this interpreter (a local master); ``true``; ``false``.
SHIP_KEY = "spark.dbt_delta_optimize.shipPackage"
#: Set on a Spark Connect session once the zip of this content was added (artifacts live per session).
SHIPPED_KEY = "spark.dbt_delta_optimize.shippedPackage"

_PACKAGE = "dbt_delta_optimize"
_DATA_SUFFIXES = (".py", ".typed", ".j2", ".properties", ".thrift")


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (``pyspark.sql.connect``), False for a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _package_root() -> str:
    """The package's folder (this module is ``<package>/engine/python_tasks.py``)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_zip(directory: str | None = None) -> str:
    """A zip of the running package (``dbt_delta_optimize/...``), built once per content; its path.

    When the package itself was imported from a zip (a driver started with ``--py-files``), that zip is returned.
    """
    import hashlib  # not at the module's top: OpenSSL's load is 2 ms of every fresh run; only Spark ships

    root = _package_root()
    if not os.path.isdir(root):  # imported from an archive: ship that archive
        archive = getattr(sys.modules[_PACKAGE].__spec__.loader, "archive", None)  # type: ignore[union-attr]
        if archive:
            return str(archive)
        raise FileNotFoundError(f"cannot find the files of {_PACKAGE} to ship (imported from {root})")
    files: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(_DATA_SUFFIXES))
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as fh:
            digest.update(fh.read())
    from .._version import __version__

    name = f"{_PACKAGE}-{__version__}-{digest.hexdigest()[:12]}.zip"
    folder = directory or os.path.join(tempfile.gettempdir(), "dbt-delta-optimize-pyfiles")
    target = os.path.join(folder, name)
    if os.path.exists(target):
        return target
    import zipfile

    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".zip-", dir=folder)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                zf.write(path, os.path.join(_PACKAGE, os.path.relpath(path, root)))
        os.replace(tmp, target)  # atomic: a concurrent builder writes the same bytes
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def _worker_python(spark: Any) -> str | None:
    conf = spark.sparkContext.getConf()
    return (
        conf.get("spark.pyspark.python")
        or os.environ.get("PYSPARK_PYTHON")
        or getattr(spark.sparkContext, "pythonExec", None)
    )


def needs_package(spark: Any, setting: str | None) -> bool:
    """Whether tasks need the zip: ``shipPackage`` true/false, else (auto) any cluster or Connect session.

    A classic session with a local master whose Python workers are this interpreter imports the
    installed package; everything else (a cluster, a Connect server) may not have it.
    """
    value = (setting or "auto").strip().lower()
    if value in ("true", "false"):
        return value == "true"
    if value != "auto":
        from ..errors import InvalidConfigError

        raise InvalidConfigError(f"{SHIP_KEY} must be auto, true or false, got {setting!r}.")
    if is_connect(spark):
        return True
    if not str(spark.sparkContext.master).startswith("local"):
        return True
    python = _worker_python(spark)
    if python is None or python in ("python3", sys.executable):
        return False
    return os.path.realpath(python) != os.path.realpath(sys.executable)


def ship_package(spark: Any) -> str:
    """Add the package zip to the session's Python path for tasks (idempotent); returns the zip's path."""
    path = package_zip()
    name = os.path.basename(path)
    if is_connect(spark):
        if spark.conf.get(SHIPPED_KEY, None) != name:
            spark.addArtifacts(path, pyfile=True)
            spark.conf.set(SHIPPED_KEY, name)
        return path
    sc = spark.sparkContext
    if name not in (getattr(sc, "_python_includes", None) or []):
        sc.addPyFile(path)
    return path
