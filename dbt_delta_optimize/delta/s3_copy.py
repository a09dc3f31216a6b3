"""A multipart upload to S3 whose parts are either uploaded bytes or byte ranges copied on the server.

The row-group copy moves large row groups byte for byte. On S3 the bytes need not pass through this
process at all: ``UploadPartCopy`` with ``x-amz-copy-source-range`` makes a part of the new object
from a range of another object, inside the store. obstore has no such call, so this module uses
botocore (the ``s3`` extra), its client made from the same storage options as the obstore store.

S3's rules shape the layout: every part but the last is at least 5 MiB, and a part is either copied
or uploaded, never mixed. Written bytes are buffered and uploaded as parts of ``_PART`` bytes; a copied
range starts a new part, so what is buffered before it must first make a part of its own. The
Parquet magic that opens the new file is four bytes: when the copied range's source holds the same
bytes just before it (the first row group of a file follows that file's own ``PAR1``), the range is
widened to take them. Otherwise the buffer is topped up to 5 MiB with the range's first bytes (read
through here) and uploaded. The footer, written last, is the last part.

A store that refuses the copy (no ``UploadPartCopy``, no read access to the source) gets the range's
bytes uploaded instead, in the same upload, with one warning; the rest of the file follows the usual
path. Any failure aborts the upload, so no part lingers. Secrets never reach a message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from ..errors import StorageAccessError

__all__ = ["MIN_PART", "S3CopyOutput", "s3_client", "s3_connector"]

log = logging.getLogger(__name__)

MIN_PART = 5 * 1024 * 1024  #: S3's smallest part (all but the last)
_PART = 16 * 1024 * 1024  #: uploaded parts: buffered bytes go up once this many are held
_MAX_COPY = 5 * 1024**3  #: S3's largest part (copied ranges are split into parts of at most this)
_MATCH = 64 * 1024  #: buffered bytes compared with the source's preceding bytes (the Parquet magic)
_READ = 32 * 1024 * 1024  #: one read when a refused range's bytes go through here
#: Error codes of a store that does not copy ranges (or may not read the source): upload the bytes instead.
_REFUSED = {"NotImplemented", "AccessDenied", "InvalidRequest", "MethodNotAllowed", "XNotImplemented"}
#: Store settings botocore is given from the options; any other S3 setting (encryption, requester pays,
#: an assumed role) is one this client would not honour, so the copy is not used there.
_HANDLED = {
    "access_key_id",
    "secret_access_key",
    "session_token",
    "region",
    "default_region",
    "endpoint",
    "virtual_hosted_style_request",
    "bucket",
    "disable_tagging",
    "copy_if_not_exists",
    "unsigned_payload",
    "checksum_algorithm",
}


def s3_connector(config: Mapping[str, str], client: Mapping[str, Any]) -> Callable[[], Any] | None:
    """How to make a botocore S3 client for the store settings obstore gets (``object_store.store_options``
    of the options over this process's ``AWS_*`` variables); None when botocore is missing or the settings
    ask for something it would not honour here. Checked now, the client made (botocore imported) on use."""
    import importlib.util

    if importlib.util.find_spec("botocore") is None:
        return None
    if set(config) - _HANDLED or client.get("proxy_url"):
        return None
    endpoint = config.get("endpoint")
    if endpoint and urlparse(endpoint).scheme == "http" and not client.get("allow_http"):
        return None
    style = "virtual" if config.get("virtual_hosted_style_request", "").lower() in ("true", "1") else "path"
    settings = {
        "region_name": config.get("region") or config.get("default_region") or "us-east-1",
        "endpoint_url": endpoint or None,
        "aws_access_key_id": config.get("access_key_id"),
        "aws_secret_access_key": config.get("secret_access_key"),
        "aws_session_token": config.get("session_token"),
        "verify": not client.get("allow_invalid_certificates", False),
    }

    def connect() -> Any:
        import botocore.config
        import botocore.session

        timeouts = {"connect_timeout": 5, "read_timeout": 60}
        retries = {"max_attempts": 4, "mode": "standard"}
        conf = botocore.config.Config(s3={"addressing_style": style}, retries=retries, **timeouts)
        return botocore.session.get_session().create_client("s3", config=conf, **settings)

    return connect


def s3_client(config: Mapping[str, str], client: Mapping[str, Any]) -> Any | None:
    """``s3_connector``'s client, made now (None where it gives none)."""
    connect = s3_connector(config, client)
    return None if connect is None else connect()


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


@dataclass
class S3CopyOutput:
    """One new object written front to back; ``copy_range`` adds a range of another object of the table.

    ``root``: the key prefix (the table root) that every copied source must be under.
    """

    connect: Callable[[], Any] = field(repr=False)  #: makes (or returns the store's) botocore client, on first use
    bucket: str
    key: str
    root: str
    fail: Callable[[Exception], Exception] = field(repr=False)
    buffer: bytearray = field(default_factory=bytearray, repr=False)
    parts: list[dict[str, Any]] = field(default_factory=list, repr=False)
    upload_id: str | None = None
    #: shared by the uploads of one store: once it refused a copy, later uploads do not ask (one warning)
    store_state: dict[str, bool] = field(default_factory=dict)
    closed: bool = False
    _made: dict[str, Any] = field(default_factory=dict, repr=False)
    #: bytes that went through this process (uploaded, or read to fill a part) and bytes copied in the store
    counts: dict[str, int] = field(default_factory=lambda: {"uploaded": 0, "read": 0, "server_copied": 0})

    @property
    def client(self) -> Any:
        if "client" not in self._made:
            self._made["client"] = self.connect()
        return self._made["client"]

    # ------------------------------------------------------------------ the sink
    def write(self, data: Any, /) -> int:
        n = len(memoryview(data))
        self.buffer += data
        while len(self.buffer) >= 2 * _PART:  # keep the part after it >= _PART so the next copy needs no top-up
            self._upload(bytes(self.buffer[:_PART]))
            del self.buffer[:_PART]
        return n

    def copy_range(self, path: str, start: int, end: int, read: Callable[[int, int], bytes]) -> bool:
        """Append bytes [start, end) of ``path`` as copied parts; False (nothing done) when they must be written."""
        source = self._source_key(path)
        if self.store_state.get("refused") or source is None or end - start < MIN_PART:
            return False
        first = self._settle_buffer(source, start, end, read)
        if first is None:
            return False
        for s, e in _pieces(first, end):
            if not self._copy_part(source, s, e, read):
                self._through(s, end, read)
                return True
        return True

    def close(self) -> None:
        """Upload what is buffered as the last part and complete the upload (a small file: one PUT)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.upload_id is None:
                self._call(self.client.put_object, Bucket=self.bucket, Key=self.key, Body=bytes(self.buffer))
                self.counts["uploaded"] += len(self.buffer)
                return
            if self.buffer or not self.parts:
                self._upload(bytes(self.buffer))
            self.buffer.clear()
            parts = {"Parts": self.parts}
            self._call(
                self.client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload=parts,
            )
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Give up the upload: its parts are deleted, no object appears."""
        self.closed = True
        if self.upload_id is not None:
            upload, self.upload_id = self.upload_id, None
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=upload)
            except Exception:  # the driver deletes uncommitted outputs; a bucket lifecycle rule ends stale uploads
                log.debug("aborting the multipart upload of %s failed", self.key)

    # ------------------------------------------------------------------ parts
    def _source_key(self, path: str) -> str | None:
        # the key as the store has it (as ``ObjectStorage.key``): the text after the bucket, '?' and '#' included
        bucket = next((p for p in (f"s3://{self.bucket}/", f"s3a://{self.bucket}/") if path.startswith(p)), None)
        if bucket is None:
            return None
        key = path[len(bucket) :]
        prefix = self.root.strip("/") + "/" if self.root.strip("/") else ""
        if not key.startswith(prefix) or "/../" in f"/{key}/":
            return None
        return key

    def _settle_buffer(self, source: str, start: int, end: int, read: Callable[[int, int], bytes]) -> int | None:
        """Leave the buffer empty before a copied part: the range widened over identical source bytes, or the
        buffer made a part of its own. Returns where the copy starts (None: the range is too short to copy)."""
        pending = len(self.buffer)
        if not pending:
            return start
        if pending <= _MATCH and start >= pending and self._source_bytes(source, start - pending, start) == self.buffer:
            self.buffer.clear()
            return start - pending
        need = max(0, MIN_PART - pending)
        if end - start - need < MIN_PART:
            return None
        if need:
            data = read(start, need)
            self.counts["read"] += len(data)
            self.buffer += data
        self._upload(bytes(self.buffer))
        self.buffer.clear()
        return start + need

    def _source_bytes(self, source: str, start: int, end: int) -> bytes:
        got = self._call(self.client.get_object, Bucket=self.bucket, Key=source, Range=f"bytes={start}-{end - 1}")
        data = bytes(got["Body"].read())
        self.counts["read"] += len(data)
        return data

    def _begin(self) -> str:
        if self.upload_id is None:
            made = self._call(self.client.create_multipart_upload, Bucket=self.bucket, Key=self.key)
            self.upload_id = str(made["UploadId"])
        return self.upload_id

    def _upload(self, data: bytes) -> None:
        upload, number = self._begin(), len(self.parts) + 1
        got = self._call(
            self.client.upload_part, Bucket=self.bucket, Key=self.key, UploadId=upload, PartNumber=number, Body=data
        )
        self.parts.append({"PartNumber": number, "ETag": got["ETag"]})
        self.counts["uploaded"] += len(data)

    def _copy_part(self, source: str, start: int, end: int, read: Callable[[int, int], bytes]) -> bool:
        """One copied part; False when the store refuses (the caller uploads the bytes instead)."""
        from botocore.exceptions import ClientError

        upload, number = self._begin(), len(self.parts) + 1
        try:
            got = self.client.upload_part_copy(
                Bucket=self.bucket,
                Key=self.key,
                UploadId=upload,
                PartNumber=number,
                CopySource={"Bucket": self.bucket, "Key": source},
                CopySourceRange=f"bytes={start}-{end - 1}",
            )
        except ClientError as exc:
            if _code(exc) not in _REFUSED:
                self.abort()
                raise self.fail(exc) from None
            self.store_state["refused"] = True
            log.warning(
                "The store refused a server-side copy (%s): large row groups go through this process from now on.",
                _code(exc),
            )
            return False
        except Exception as exc:
            self.abort()
            raise self.fail(exc) from None
        self.parts.append({"PartNumber": number, "ETag": got["CopyPartResult"]["ETag"]})
        self.counts["server_copied"] += end - start
        return True

    def _through(self, start: int, end: int, read: Callable[[int, int], bytes]) -> None:
        """The bytes [start, end) read here and written as usual (a refused copy)."""
        for s in range(start, end, _READ):
            data = read(s, min(_READ, end - s))
            self.counts["read"] += len(data)
            self.write(data)

    def _call(self, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except StorageAccessError:
            raise
        except Exception as exc:
            self.abort()
            raise self.fail(exc) from None


def _pieces(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) as copy parts of at most 5 GiB, each at least 5 MiB."""
    count = -(-(end - start) // _MAX_COPY)
    step = -(-(end - start) // count)
    return [(s, min(end, s + step)) for s in range(start, end, step)]
