"""The jar resolver of pip-only installs, against a Maven repository laid out on disk (file://).

The real download from Maven Central is covered end to end by tests/test_wheel.py (a fresh venv).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib

import pytest

from dbt_delta_optimize.engine import jars
from dbt_delta_optimize.errors import DeltaOptimizeError, StorageAccessError

V = "0.0.1"
POM = """<?xml version="1.0"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <properties><kernel.version>{version}</kernel.version></properties>
  <dependencies>{deps}</dependencies>
</project>"""


def _dep(group: str, name: str, version: str, scope: str | None = None, optional: bool = False) -> str:
    extra = (f"<scope>{scope}</scope>" if scope else "") + ("<optional>true</optional>" if optional else "")
    return f"<dependency><groupId>{group}</groupId><artifactId>{name}</artifactId><version>{version}</version>{extra}</dependency>"


def _publish(repo, art: jars.Artifact, deps: str, body: bytes, *, algo: str = "sha1") -> None:
    folder = repo / os.path.dirname(art.path("jar"))
    folder.mkdir(parents=True, exist_ok=True)
    pom = POM.format(version=art.version, deps=deps).encode()
    (repo / art.path("pom")).write_bytes(pom)
    (repo / (art.path("pom") + ".sha1")).write_text(hashlib.sha1(pom).hexdigest())
    (repo / art.path("jar")).write_bytes(body)
    (repo / (art.path("jar") + f".{algo}")).write_text(hashlib.new(algo, body).hexdigest() + "  " + art.jar_name)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A Maven repository on disk with a delta-spark for "9.9" whose POM names test, provided and optional deps."""
    monkeypatch.setattr(jars, "DELTA_JVM_VERSION", V)  # not a pinned version: the repository's checksums count
    repo = tmp_path / "repo"
    root = jars.delta_artifact("9.9")
    storage = jars.Artifact("io.delta", "delta-storage", V)
    kernel = jars.Artifact("io.delta", "delta-kernel-api", V)
    deps = "".join(
        [
            _dep("org.scala-lang", "scala-library", "2.13.17"),
            _dep("io.delta", "delta-storage", "${project.version}"),
            _dep("io.delta", "delta-kernel-api", "${kernel.version}"),
            _dep("io.delta", "delta-test-only", "1", scope="test"),
            _dep("io.delta", "delta-provided", "1", scope="provided"),
            _dep("io.delta", "delta-optional", "1", optional=True),
        ]
    )
    _publish(repo, root, deps, b"root jar")
    _publish(repo, storage, "", b"storage jar", algo="sha256")
    _publish(repo, kernel, _dep("io.delta", "delta-storage", V), b"kernel jar")
    monkeypatch.setenv(jars.REPO_ENV, repo.as_uri())
    monkeypatch.setenv(jars.HOME_ENV, str(tmp_path / "home"))
    return repo


def test_resolves_the_io_delta_closure_verifies_and_caches(repo, tmp_path):
    found = jars.resolve_jars(spark_version="9.9")
    names = [os.path.basename(p) for p in found]
    assert names == [f"delta-spark_9.9_2.13-{V}.jar", *(f"{n}-{V}.jar" for n in ("delta-storage", "delta-kernel-api"))]
    assert all(p.startswith(str(tmp_path / "home" / "jars")) for p in found)
    assert pathlib.Path(found[1]).read_bytes() == b"storage jar"
    manifest = json.loads((tmp_path / "home" / "jars" / f"delta-spark_9.9_2.13-{V}" / "manifest.json").read_text())
    assert [e["sha256"] for e in manifest["jars"]] == [
        hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest() for p in found
    ]
    import shutil

    shutil.rmtree(repo)  # the cache answers without the repository
    assert jars.resolve_jars(spark_version="9.9") == found


def test_a_jar_whose_checksum_differs_is_refused_and_nothing_is_kept(repo, tmp_path):
    art = jars.Artifact("io.delta", "delta-kernel-api", V)
    (repo / art.path("jar")).write_bytes(b"tampered")
    with pytest.raises(DeltaOptimizeError, match="checksum mismatch"):
        jars.resolve_jars(spark_version="9.9")
    folder = tmp_path / "home" / "jars" / f"delta-spark_9.9_2.13-{V}"
    assert not (folder / "manifest.json").exists() and not (folder / art.jar_name).exists()
    assert not [n for n in os.listdir(folder) if n.endswith(".part")]
    assert jars.cached_jars(str(folder)) == []


def test_pinned_digests_win_over_the_repository(repo, monkeypatch):
    root = jars.delta_artifact("9.9")
    monkeypatch.setitem(jars.PINNED_SHA256, root.coordinate, "0" * 64)  # the repository's own .sha1 matches
    with pytest.raises(DeltaOptimizeError, match="checksum mismatch"):
        jars.resolve_jars(spark_version="9.9")


def test_a_jar_without_any_checksum_is_refused(repo):
    art = jars.Artifact("io.delta", "delta-storage", V)
    os.remove(repo / (art.path("jar") + ".sha256"))
    with pytest.raises(DeltaOptimizeError, match=r"no \.sha256 or \.sha1"):
        jars.resolve_jars(spark_version="9.9")


def test_an_unreachable_repository_is_a_storage_error_naming_the_fixes(monkeypatch, tmp_path):
    from tests.servers import free_port

    monkeypatch.setenv(jars.REPO_ENV, f"http://127.0.0.1:{free_port()}/maven2")
    monkeypatch.setenv(jars.HOME_ENV, str(tmp_path))
    with pytest.raises(StorageAccessError, match="DBT_DELTA_OPTIMIZE_MAVEN_REPO") as info:
        jars.resolve_jars(spark_version="9.9", timeout=5)
    assert "DBT_DELTA_OPTIMIZE_JARS" in str(info.value)
    assert info.value.retryable  # docs/errors.md: Maven Central not reached is exit 3


def test_the_jars_command_exits_3_when_maven_cannot_be_reached(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from dbt_delta_optimize.cli.main import cli
    from dbt_delta_optimize.engine import session
    from tests.servers import free_port

    monkeypatch.setenv(jars.REPO_ENV, f"http://127.0.0.1:{free_port()}/maven2")
    monkeypatch.setenv(jars.HOME_ENV, str(tmp_path))
    monkeypatch.setattr(session, "delta_jars", lambda: [])  # no jars set up: they must be downloaded
    result = CliRunner().invoke(cli, ["jars"])
    assert result.exit_code == 3, result.output
    assert "cannot download Delta's jars" in result.output and "Traceback" not in result.output


def test_the_pinned_versions_match_the_installed_pyspark():
    """The pins cover the artifact the installed pyspark asks for (a pyspark bump must update them)."""
    assert jars.delta_artifact().coordinate in jars.PINNED_SHA256


def test_the_embedded_session_finds_the_resolved_cache(repo, tmp_path, monkeypatch):
    """No DBT_DELTA_OPTIMIZE_JARS and no `make setup` folder: delta_jars() is the user cache (a pip-only install)."""
    from dbt_delta_optimize.engine import session

    monkeypatch.delenv(session.JARS_ENV, raising=False)
    monkeypatch.setattr(session, "default_jars_dir", lambda: str(tmp_path / "no-such-dir"))
    monkeypatch.setattr(jars, "spark_binary_version", lambda: "9.9")
    assert session.delta_jars() == []  # nothing resolved yet: no made-up path
    found = jars.resolve_jars()
    assert session.delta_jars() == found
