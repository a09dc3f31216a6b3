"""Benchmark: the row-group copy on S3 (a moto server started here), inside the store vs through this process.

Not a test. delta-rs writes F files of one large row group each (default 8 x 64 MiB of random
integers) to a bucket; each run compacts its own server-side copy of that table into one file, with
the copy made inside the store (UploadPartCopy: the default where botocore is installed) and with
today's copy through the process (the same code with the server copy unavailable), in alternating
order. The bytes that pass through the process are counted where they do: every read and write of
our obstore Storage and every request and response body of botocore. Rows are checked each run.

``--azure`` also asks Azurite (started here) for Put Block From URL, the Azure call a server-side
copy would need, and prints its answer.

    .venv/bin/python bench/s3_server_copy.py [--files 8] [--mib 64] [--repeats 3] [--azure]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BYTES_PER_ROW = 16  #: int64 + int64 + int32 (20 bytes), about 16 once written (the sequential ids encode smaller)


def build(url: str, files: int, mib: int) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    rows = mib * 1024 * 1024 // BYTES_PER_ROW
    rng = np.random.default_rng(11)
    props = WriterProperties(max_row_group_size=rows + 1, compression="SNAPPY")
    for k in range(files):
        ids = np.arange(k * rows, (k + 1) * rows, dtype=np.int64)
        v, w = rng.integers(0, 2**62, rows), rng.integers(0, 2**31 - 1, rows, dtype=np.int32)
        write_deltalake(url, pa.table({"id": ids, "v": v, "w": w}), mode="append", writer_properties=props)


def clone(client, bucket: str, src: str, dst: str) -> None:
    """Every object of the table under ``src`` copied to ``dst`` inside the store (data paths are relative)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=src + "/")
    for page in pages:
        for o in page.get("Contents", []):
            key = dst + o["Key"][len(src) :]
            client.copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": o["Key"]})


def run(url: str, server: bool, min_bytes: str) -> tuple[float, int]:
    """(seconds, bytes through the process) of one compaction into one file."""
    import pytest

    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.delta.object_store import ObjectStorage
    from tests.test_s3_server_copy import Counted

    with pytest.MonkeyPatch.context() as patch:
        if not server:
            patch.setattr(ObjectStorage, "open_copy_output", lambda self, path, root: None)
        counted = Counted(patch)
        t = time.perf_counter()
        m = optimize(None, url, row_group_copy_min_bytes=min_bytes, min_file_size="4g", max_file_size="4g")
        dt = time.perf_counter() - t
    assert m.num_files_added == 1, m
    return dt, counted.bytes


def azure_probe() -> dict[str, str]:
    """Azurite's answer to Put Block From URL (a range of one blob staged as a block of another)."""
    import base64
    import email.utils
    import hashlib
    import hmac
    import urllib.error
    import urllib.request

    from tests.servers import AZURITE_ACCOUNT, AZURITE_KEY, azurite

    def signed(method: str, url: str, path: str, query: dict[str, str], headers: dict[str, str], length: int) -> int:
        headers = {**headers, "x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        canonical = "\n".join(
            [
                method,
                "",
                "",
                str(length) if length else "",
                "",
                "application/octet-stream",
                *[""] * 6,
                "\n".join(f"{k}:{v}" for k, v in sorted(headers.items())),
                f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{path}"
                + "".join(f"\n{k}:{v}" for k, v in sorted(query.items())),
            ]
        )
        digest = hmac.new(base64.b64decode(AZURITE_KEY), canonical.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(digest).decode()}"
        q = "&".join(f"{k}={v}" for k, v in query.items())
        data = b"x" * length if length else b""
        headers["Content-Type"] = "application/octet-stream"
        req = urllib.request.Request(f"{url}/{AZURITE_ACCOUNT}/{path}?{q}".rstrip("?"), data, headers, method=method)
        try:
            return int(urllib.request.urlopen(req, timeout=10).status)
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            probe["code"] = body.split("<Code>", 1)[-1].split("</Code>", 1)[0] if "<Code>" in body else body[:200]
            return int(exc.code)

    probe: dict[str, str] = {}
    with azurite() as server:
        container = server.new_container()
        src = f"{container}/src.bin"
        put = signed("PUT", server.url, src, {}, {"x-ms-blob-type": "BlockBlob"}, 1024)
        block = base64.b64encode(b"block-000").decode()
        headers = {"x-ms-copy-source": f"{server.url}/{AZURITE_ACCOUNT}/{src}", "x-ms-source-range": "bytes=0-511"}
        status = signed("PUT", server.url, f"{container}/dst.bin", {"comp": "block", "blockid": block}, headers, 0)
        probe.update({"put_source_blob": str(put), "put_block_from_url": str(status)})
    return probe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--mib", type=int, default=64, help="MiB per file (one row group each)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-bytes", default="32m", help="rowGroupCopyMinBytes (the default threshold)")
    ap.add_argument("--azure", action="store_true", help="also probe Azurite for Put Block From URL")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    args = ap.parse_args()
    from deltalake import DeltaTable

    from dbt_delta_optimize.delta.object_store import store_options
    from dbt_delta_optimize.delta.s3_copy import s3_client
    from tests.servers import moto_s3

    out: dict[str, object] = {}
    with moto_s3() as server:
        os.environ.update(server.env())
        bucket = server.new_bucket()
        client = s3_client(*store_options("aws", server.env()))
        t0 = time.time()
        build(f"s3://{bucket}/src", args.files, args.mib)
        adds = DeltaTable(f"s3://{bucket}/src").get_add_actions(flatten=True)
        size = sum(adds.column("size_bytes").to_pylist())
        rows = sum(adds.column("num_records").to_pylist())
        print(f"built {args.files} files, {size / 2**20:.0f} MiB in {time.time() - t0:.0f}s", flush=True)
        modes = {"inside the store": True, "through the process": False}
        times: dict[str, list[float]] = {m: [] for m in modes}
        moved: dict[str, list[int]] = {m: [] for m in modes}
        for r in range(args.repeats):
            for mode in modes if r % 2 == 0 else reversed(modes):
                dst = f"run-{r}-{'server' if modes[mode] else 'through'}"
                clone(client, bucket, "src", dst)
                dt, n = run(f"s3://{bucket}/{dst}", modes[mode], args.min_bytes)
                got = sum(
                    DeltaTable(f"s3://{bucket}/{dst}").get_add_actions(flatten=True).column("num_records").to_pylist()
                )
                assert got == rows, (mode, got, rows)
                times[mode].append(dt)
                moved[mode].append(n)
                print(f"repeat {r} {mode:>20}: {dt:6.2f}s, {n / 2**20:8.1f} MiB through the process", flush=True)
    med = {m: statistics.median(v) for m, v in times.items()}
    share = {m: statistics.median(v) / size for m, v in moved.items()}
    print(f"\n{args.files} files x {args.mib} MiB ({size / 2**20:.0f} MiB) on moto S3, medians of {args.repeats}")
    print("| copy | time | through the process | share of the input |")
    print("|---|---|---|---|")
    for m in modes:
        print(f"| {m} | {med[m]:.2f}s | {statistics.median(moved[m]) / 2**20:.1f} MiB | {share[m]:.2%} |")
    out.update({"input_bytes": size, "median_s": med, "times_s": times, "bytes_through": moved, "share": share})
    if args.azure:
        probe = azure_probe()
        print(f"\nAzurite, Put Block From URL: {probe}")
        out["azurite"] = probe
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
