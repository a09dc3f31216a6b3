"""Delta's JVM jars for a pip-only install: resolved from Maven Central into a user cache, checksums verified.

The ``delta-spark`` wheel holds only Python; the JVM side is ``io.delta:delta-spark_<spark>_2.13`` and
its ``io.delta`` dependencies (everything else they need ships inside pyspark). ``make setup`` copies
them with Maven; a user who ran ``pip install`` has no Maven, so this module reads the POMs itself,
downloads the jars over HTTPS into ``$DBT_DELTA_OPTIMIZE_HOME/jars/...`` (default
``~/.cache/dbt-delta-optimize``), and checks each one against a pinned SHA-256 (the versions we test)
or Maven Central's own ``.sha256`` / ``.sha1``. A manifest written last marks a complete resolution, so
later calls read the cache without the network. No Ivy, no ``spark.jars.packages`` download at session start.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import DeltaOptimizeError, StorageAccessError

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

# Every run imports this module (the session's settings name the jars); only a resolution that downloads needs
# urllib, hashlib, tempfile and xml, and only a new session the installed pyspark's metadata: those are imported
# where used (about 25 ms of a fresh process's start, docs/performance.md, "Issue 45, a fresh process without pandas").

__all__ = [
    "DELTA_JVM_VERSION",
    "HOME_ENV",
    "MAVEN_CENTRAL",
    "REPO_ENV",
    "Artifact",
    "cache_dir",
    "cached_jars",
    "default_home",
    "delta_artifact",
    "resolve_jars",
]

#: delta-spark version whose jars we load. Maven Central's newest delta-spark_4.2_2.13 is 4.4.0.
DELTA_JVM_VERSION = "4.4.0"
HOME_ENV = "DBT_DELTA_OPTIMIZE_HOME"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: A Maven repository to use instead of Maven Central (a company mirror), ``https://`` or ``file://``.
REPO_ENV = "DBT_DELTA_OPTIMIZE_MAVEN_REPO"
MANIFEST = "manifest.json"
_GROUP = "io.delta"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}

#: SHA-256 of the jars of the versions we test (equal to Maven Central's published .sha256 files).
PINNED_SHA256: Mapping[str, str] = {
    "io.delta:delta-spark_4.2_2.13:4.4.0": "27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead",
    "io.delta:delta-storage:4.4.0": "c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc",
    "io.delta:delta-kernel-api:4.4.0": "ee9b5a14ac3b7efdff4d61a58478fe8eb0e5a3fbca43889dca7290795fe79a11",
    "io.delta:delta-kernel-defaults:4.4.0": "225c975199e4718b38ee5b7e6da7f19e9585024262b2cec2656b32151a856b0b",
    "io.delta:delta-kernel-unitycatalog:4.4.0": "cea22dfb4ac562b3cd27bf652697750e8336009d73fb06631363aaaad5345ffa",
}


@dataclass(frozen=True)
class Artifact:
    """One Maven artifact (group, name, version)."""

    group: str
    name: str
    version: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"

    def path(self, ext: str) -> str:
        """Its file's path in a Maven repository (``io/delta/<name>/<version>/<name>-<version>.<ext>``)."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.name}-{self.version}.{ext}"

    @property
    def jar_name(self) -> str:
        return f"{self.name}-{self.version}.jar"


def default_home() -> str:
    """The package's user folder: ``$DBT_DELTA_OPTIMIZE_HOME``, else ``~/.cache/dbt-delta-optimize``."""
    return os.environ.get(HOME_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "dbt-delta-optimize")


def spark_binary_version() -> str:
    """The installed pyspark's major.minor (read from its metadata: pyspark is not imported)."""
    from importlib import metadata

    return ".".join(metadata.version("pyspark").split(".")[:2])


def delta_artifact(spark_version: str | None = None) -> Artifact:
    """``io.delta:delta-spark_<spark major.minor>_2.13:<DELTA_JVM_VERSION>`` for the installed pyspark."""
    return Artifact(_GROUP, f"delta-spark_{spark_version or spark_binary_version()}_2.13", DELTA_JVM_VERSION)


def cache_dir(home: str | None = None, root: Artifact | None = None) -> str:
    """Where one resolution's jars live: ``<home>/jars/<root artifact name>-<version>``."""
    art = root or delta_artifact()
    return os.path.join(home or default_home(), "jars", f"{art.name}-{art.version}")


def cached_jars(folder: str | None = None) -> list[str]:
    """The jars of a complete earlier resolution (its manifest, each file present at its size), else []."""
    folder = folder or cache_dir()
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as fh:
            entries = json.load(fh)["jars"]
        jars = [(os.path.join(folder, e["file"]), int(e["size"])) for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not jars or any(not os.path.isfile(p) or os.path.getsize(p) != size for p, size in jars):
        return []
    return [p for p, _ in jars]


# ----------------------------------------------------------------------------- fetching
def _repo() -> str:
    return (os.environ.get(REPO_ENV) or MAVEN_CENTRAL).rstrip("/")


def _open(url: str, timeout: float) -> Iterator[bytes]:
    """The body of ``url`` in chunks; a missing file is FileNotFoundError, anything else StorageAccessError."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            while chunk := resp.read(1 << 20):
                yield chunk
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise FileNotFoundError(url) from exc
        raise StorageAccessError(
            f"{url} answered HTTP {exc.code}; try again later, or set {REPO_ENV}.",
            retryable=exc.code == 429 or exc.code >= 500,  # throttled or a server error: later may work
        ) from exc
    except FileNotFoundError:
        raise
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, FileNotFoundError):  # a file:// mirror without that file
            raise FileNotFoundError(url) from exc
        raise StorageAccessError(
            f"cannot download Delta's jars from {_repo()} ({reason}). Check the network or a proxy "
            f"(HTTPS_PROXY), set {REPO_ENV} to a Maven mirror, or point DBT_DELTA_OPTIMIZE_JARS at the jar files.",
            retryable=True,  # not reached: docs/errors.md's exit 3
        ) from exc


def _read(url: str, timeout: float) -> bytes:
    return b"".join(_open(url, timeout))


def _published_digest(url: str, timeout: float) -> tuple[str, str]:
    """Maven's own checksum of a file: (algorithm, hex), ``.sha256`` if published, else ``.sha1``."""
    for algo in ("sha256", "sha1"):
        try:
            text = _read(f"{url}.{algo}", timeout).decode("ascii", "replace").strip()
        except FileNotFoundError:
            continue
        digest = text.split()[0].lower() if text else ""
        if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", digest):
            return algo, digest
    raise DeltaOptimizeError(f"{url} has no .sha256 or .sha1 checksum: refusing to use it unverified.")


def _download_pom(art: Artifact, timeout: float) -> bytes:
    import hashlib

    url = f"{_repo()}/{art.path('pom')}"
    body = _read(url, timeout)
    algo, want = _published_digest(url, timeout)
    if hashlib.new(algo, body).hexdigest() != want:
        raise DeltaOptimizeError(f"checksum mismatch for {url} ({algo}): not using it; try again.")
    return body


def _download_jar(art: Artifact, folder: str, timeout: float) -> tuple[str, int, str]:
    """Download one jar into ``folder`` through a temporary file; (file name, size, sha256) once verified."""
    import hashlib
    import tempfile

    url = f"{_repo()}/{art.path('jar')}"
    pinned = PINNED_SHA256.get(art.coordinate)
    algo, want = ("sha256", pinned) if pinned else _published_digest(url, timeout)
    sha256, check = hashlib.sha256(), hashlib.new(algo)
    fd, tmp = tempfile.mkstemp(prefix=f".{art.jar_name}.", suffix=".part", dir=folder)
    try:
        size = 0
        with os.fdopen(fd, "wb") as out:
            for chunk in _open(url, timeout):
                out.write(chunk)
                sha256.update(chunk)
                check.update(chunk)
                size += len(chunk)
        if check.hexdigest() != want:
            raise DeltaOptimizeError(
                f"checksum mismatch for {url}: {algo} {check.hexdigest()}, expected {want}. Nothing was kept; "
                f"try again, or check what sits between this machine and {_repo()}."
            )
        os.replace(tmp, os.path.join(folder, art.jar_name))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return art.jar_name, size, sha256.hexdigest()


# ----------------------------------------------------------------------------- POMs
def _text(node: ET.Element | None) -> str | None:
    return node.text.strip() if node is not None and node.text else None


def _substitute(value: str, props: Mapping[str, str]) -> str:
    return re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), value)


def pom_dependencies(pom: bytes, art: Artifact) -> list[Artifact]:
    """The ``io.delta`` compile/runtime dependencies a POM declares (test, provided and optional ones are not)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(pom)
    props = {"project.version": art.version, "project.groupId": art.group}
    for prop in root.findall("m:properties/*", _NS):
        if prop.text is not None:
            props[prop.tag.split("}", 1)[-1]] = prop.text.strip()
    out = []
    for dep in root.findall("m:dependencies/m:dependency", _NS):
        group = _substitute(_text(dep.find("m:groupId", _NS)) or "", props)
        scope = _text(dep.find("m:scope", _NS)) or "compile"
        if group != _GROUP or scope not in ("compile", "runtime") or _text(dep.find("m:optional", _NS)) == "true":
            continue
        name = _substitute(_text(dep.find("m:artifactId", _NS)) or "", props)
        version = _substitute(_text(dep.find("m:version", _NS)) or art.version, props)
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", version):
            raise DeltaOptimizeError(f"the POM of {art.coordinate} names a dependency {name}:{version} we cannot use.")
        out.append(Artifact(group, name, version))
    return out


def _closure(root: Artifact, timeout: float) -> list[Artifact]:
    """``root`` and its transitive ``io.delta`` dependencies, in breadth-first order."""
    seen: dict[str, Artifact] = {}
    queue = [root]
    while queue:
        art = queue.pop(0)
        if art.name in seen:
            continue
        seen[art.name] = art
        queue.extend(pom_dependencies(_download_pom(art, timeout), art))
    return list(seen.values())


def resolve_jars(*, home: str | None = None, spark_version: str | None = None, timeout: float = 60.0) -> list[str]:
    """Delta's jars for the installed pyspark: from the cache, else downloaded and verified into it."""
    root = delta_artifact(spark_version)
    folder = cache_dir(home, root)
    found = cached_jars(folder)
    if found:
        return found
    os.makedirs(folder, exist_ok=True)
    entries: list[dict[str, str | int]] = []
    for art in _closure(root, timeout):
        name, size, digest = _download_jar(art, folder, timeout)
        entries.append({"coordinate": art.coordinate, "file": name, "size": size, "sha256": digest})
    manifest = {"root": root.coordinate, "repository": _repo(), "jars": entries}
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".manifest.", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
    os.replace(tmp, os.path.join(folder, MANIFEST))
    return [os.path.join(folder, str(e["file"])) for e in entries]
