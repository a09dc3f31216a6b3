"""Tables on S3 (a moto server) and Azure Blob Storage (Azurite), both started by the tests, end to end,
with only the cloud's standard environment variables set.

Spark has no S3 connector here: the data path reads and writes through the store inside Spark tasks
(Arrow), and the rows are read back with delta-rs.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.object_store import redact, store_options
from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.errors import InvalidArgumentError
from tests.helpers import deltalake_table

SECRET = "testing-secret-value"


@dataclass(frozen=True)
class Store:
    root: str  #: a fresh bucket or container
    env: dict[str, str]  #: the cloud's standard environment variables for the server
    missing: str  #: a table in a bucket or container that does not exist
    unreachable: dict[str, str]  #: env pointing at a port where nothing listens


@pytest.fixture(params=["s3", "azure"])
def store(request, monkeypatch) -> Store:
    """A moto S3 server or Azurite, the standard variables set as a user would, and a fresh bucket/container."""
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        made = Store(f"s3://{server.new_bucket()}", server.env(), "s3://no-such-bucket-ddo/t", {})
        made.unreachable["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    else:
        server = request.getfixturevalue("azure_server")
        made = Store(f"az://{server.new_container()}", server.env(), "az://no-such-container-ddo/t", {})
        made.unreachable["AZURITE_BLOB_STORAGE_URL"] = "http://127.0.0.1:9"
    for key, value in made.env.items():
        monkeypatch.setenv(key, value)
    return made


def _table(url: str, batches: int = 3) -> list[tuple]:
    for i in range(batches):
        ids = list(range(i * 20, i * 20 + 20))
        data = pa.table({"id": ids, "x": [j % 7 for j in ids], "part": ["a" if j % 2 else "b" for j in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")
    return _rows(url)


def _rows(url: str) -> list[tuple]:
    t = deltalake_table(url)
    return sorted(zip(t.column("id").to_pylist(), t.column("x").to_pylist(), t.column("part").to_pylist()))


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_option_mapping_uses_deltalake_keys_and_drops_its_own():
    config, client = store_options(
        "aws",
        {
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_ENDPOINT_URL": "http://h",
            "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        },
    )
    assert config == {"access_key_id": "k", "endpoint": "http://h"} and client["allow_http"] is True
    config, _ = store_options("azure", {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "s"})
    assert config == {"account_name": "acct", "account_key": "s"}
    config, _ = store_options("gcp", {"GOOGLE_SERVICE_ACCOUNT": "/k.json", "AWS_REGION": "x"})
    assert config == {"service_account": "/k.json"}
    assert redact("key=abcd1234 id=k", {"AWS_SECRET_ACCESS_KEY": "abcd1234"}) == "key=*** id=k"


@pytest.mark.parametrize(
    ("url", "bucket"),
    [
        ("gs://bkt/db/t", "gs://bkt"),
        ("s3a://bkt/db/t", "s3a://bkt"),
        ("abfss://c@acct.dfs.core.windows.net/db/t", "abfss://c@acct.dfs.core.windows.net"),
        ("abfs://c@acct.dfs.core.windows.net/db/t", "abfs://c@acct.dfs.core.windows.net"),
        ("az://c/db/t", "az://c"),
    ],
)
def test_cloud_urls_route_to_one_bucket_and_keep_keys_inside_it(url, bucket):
    """No server: every supported URL form names its bucket or container, and keys never leave it."""
    from dbt_delta_optimize.delta.object_store import ObjectStorage

    storage = storage_for(url, {"GOOGLE_SERVICE_ACCOUNT": "/k.json"})
    assert isinstance(storage, ObjectStorage) and storage.options == {"GOOGLE_SERVICE_ACCOUNT": "/k.json"}
    assert storage.key(f"{url}/_delta_log/00000000000000000000.json") == "db/t/_delta_log/00000000000000000000.json"
    assert storage.key(bucket) == ""
    other = url.replace(bucket, bucket.replace("://", "://other-"), 1)
    with pytest.raises(InvalidArgumentError, match="is not in the store"):
        storage.key(f"{other}/part-0.parquet")


@pytest.mark.parametrize("url", ["hdfs://nn/t", "wasbs://c@a.blob.core.windows.net/t", "ftp://h/t"])
def test_unsupported_schemes_are_refused_naming_them(url):
    with pytest.raises(InvalidArgumentError, match=url.split(":")[0]):
        storage_for(url)
    res = _run("info", url)
    assert res.exit_code == 2 and "not supported" in res.stderr and "s3://" in res.stderr


def test_read_commands(store):
    url = f"{store.root}/events"
    _table(url)
    res = _run("optimize", url, "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["numBins"] == 2 and plan["filesToRewrite"] == 6
    res = _run("info", url, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["numFiles"] == 6
    res = _run("history", url, "--json")
    assert res.exit_code == 0 and [e["operation"] for e in json.loads(res.stdout)] == ["WRITE"] * 3
    res = _run("health", url, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["numFiles"] == 6


def test_optimize_and_zorder_keep_every_row(spark, store):
    url = f"{store.root}/events"
    before = _table(url)
    res = _run("optimize", url, "--json")
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)
    assert m["numFilesRemoved"] == 6 and m["numFilesAdded"] == 2 and len(m["committedVersions"]) == 1
    assert _rows(url) == before and len(DeltaTable(url).file_uris()) == 2
    res = _run("validate", url)
    assert res.exit_code == 0, res.output

    _table(url, batches=2)
    before = _rows(url)
    res = _run("optimize", url, "--zorder-by", "id,x", "--json")
    assert res.exit_code == 0, res.output
    history = DeltaTable(url).history(1)[0]
    assert history["operation"] == "OPTIMIZE" and json.loads(history["operationParameters"]["zOrderBy"]) == ["id", "x"]
    assert _rows(url) == before
    assert _run("validate", url).exit_code == 0
    assert not [u for u in DeltaTable(url).file_uris() if "_delta_optimize_staging" in u]


def test_missing_table_and_bucket_are_clear_errors(store):
    res = _run("optimize", f"{store.root}/nothing-here")
    assert res.exit_code == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr
    res = _run("health", store.missing)
    assert res.exit_code == 2 and res.stderr.startswith("error:") and "Kernel error" not in res.stderr


@pytest.mark.parametrize("command", ["info", "optimize"])
def test_unreachable_endpoint_is_retryable_in_one_line_without_leaking_the_secret(store, command):
    """Nothing listens at the endpoint: exit 3 (retry later), one line naming it, within 60 s, no secret."""
    env = {**os.environ, **store.unreachable}
    secret = base64.b64encode(b"do-not-print-this-1234").decode()  # Azure keys are base64
    option = "AWS_SECRET_ACCESS_KEY" if store.root.startswith("s3") else "AZURE_STORAGE_ACCOUNT_KEY"
    args = [command, f"{store.root}/t", "--storage-option", f"{option}={secret}"]
    proc = subprocess.run(
        [sys.executable, "-m", "dbt_delta_optimize.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # the store's client gives up in seconds (bounded connect timeout and retries)
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:"), proc.stderr
    assert "127.0.0.1:9" in proc.stderr and "Traceback" not in proc.stderr
    assert secret not in proc.stderr + proc.stdout and SECRET not in proc.stderr


def test_storage_failures_are_typed_by_the_store_library_not_by_their_text():
    """obstore's exception types decide: denied is final (2), a generic failure retryable (3), missing is missing."""
    from obstore.exceptions import GenericError, NotSupportedError, PermissionDeniedError, UnauthenticatedError

    from dbt_delta_optimize.delta.object_store import ObjectStorage
    from dbt_delta_optimize.errors import StorageAccessError, exit_code

    storage = ObjectStorage("s3://bkt/t", {"AWS_SECRET_ACCESS_KEY": SECRET})
    path = "s3://bkt/t/_delta_log/00000000000000000000.json"
    for exc in (PermissionDeniedError("403 Forbidden"), UnauthenticatedError("no"), NotSupportedError("no")):
        failure = storage._fail(exc, path)
        assert isinstance(failure, StorageAccessError) and not failure.retryable and exit_code(failure) == 2
    # a generic failure whose text says "403" is still what its type says: the store did not complete the request
    failure = storage._fail(GenericError(f"403 Forbidden NoSuchBucket {SECRET}"), path)
    assert isinstance(failure, StorageAccessError) and failure.retryable and exit_code(failure) == 3
    assert isinstance(failure, OSError) and not isinstance(failure, InvalidArgumentError)
    assert SECRET not in str(failure)
    assert isinstance(storage._fail(FileNotFoundError(path), path), FileNotFoundError)


RACER = """
import json, sys
from dbt_delta_optimize.api import optimize
m = optimize(None, sys.argv[1], max_threads=1)
print(json.dumps({"committed": list(m.committed_versions), "dropped": [d["reason"] for d in m.dropped_bins]}))
"""


@pytest.mark.slow
def test_three_racing_optimizers_leave_every_version_whole(store):
    url = f"{store.root}/race"
    before = _table(url)
    v0 = DeltaTable(url).version()
    env = {**os.environ, **store.env}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    winners = [r for r in results if r["committed"]]
    assert len(winners) == 1 and winners[0]["committed"] == [v0 + 1], results
    for loser in (r for r in results if not r["committed"]):  # every bin lost to the winner's compaction
        assert loser["dropped"] and all("ConcurrentDeleteDeleteError" in d for d in loser["dropped"])
    dt = DeltaTable(url)
    assert dt.version() == v0 + 1 and _rows(url) == before
    for v in range(dt.version() + 1):  # every version whole: deltalake loads each one
        assert DeltaTable(url, version=v).version() == v


def test_dbt_storage_options_setting_and_var(spark, store, monkeypatch, tmp_path):
    """dbt: meta.delta_optimize.storage_options (or the project var) reaches the log, the plan and the tasks."""
    from dbt_delta_optimize.dbt.bridge import Bridge
    from dbt_delta_optimize.dbt.settings import parse_settings

    url = f"{store.root}/dbt"
    before = _table(url)
    options = dict(store.env)
    if store.root.startswith("az://"):  # as explicit settings, the emulator is an endpoint
        options = {
            k: v for k, v in options.items() if k not in ("AZURITE_BLOB_STORAGE_URL", "AZURE_STORAGE_USE_EMULATOR")
        }
        options["AZURE_ENDPOINT"] = f"{store.env['AZURITE_BLOB_STORAGE_URL']}/{store.env['AZURE_STORAGE_ACCOUNT_NAME']}"
    for key in store.env:  # nothing from the environment: only the settings
        monkeypatch.delenv(key, raising=False)
    planned = Bridge().run_operation(
        url, dry_run=True, storage_options=options, invocation_id="inv-s", target_path=str(tmp_path)
    )
    assert planned["status"] == "planned" and planned["plan"]["filesToRewrite"] == 6, planned
    settings = {"mode": "optimize", "storage_options": options}
    done = Bridge().run_model(url, settings, model="m", invocation_id="inv-s", target_path=str(tmp_path))
    assert done["status"] == "optimized" and done["files_before"] == 6 and done["files_after"] == 2, done
    recorded = (tmp_path / "delta_optimize_results.json").read_text()
    secret = options.get("AWS_SECRET_ACCESS_KEY") or options["AZURE_STORAGE_ACCOUNT_KEY"]
    assert secret not in recorded  # settings never reach the results file
    assert parse_settings({"storage_options": {"AWS_ALLOW_HTTP": True}}).storage_options == {"AWS_ALLOW_HTTP": "true"}
    with pytest.raises(InvalidArgumentError, match="storage_options"):
        parse_settings({"storage_options": ["AWS_REGION=x"]})
    for key, value in options.items():
        monkeypatch.setenv(key, value)
    assert _rows(url) == before


def test_auto_compact_cli_on_a_store(spark, store):
    url = f"{store.root}/ac"
    before = _table(url, batches=4)
    res = _run("auto-compact", url, "--enable", "--min-num-files", "2", "--since-version", "-1", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["status"] == "runOnModifiedPartitions" and out["metrics"]["numFilesRemoved"] == 8, out
    assert _rows(url) == before and len(DeltaTable(url).file_uris()) == 2
