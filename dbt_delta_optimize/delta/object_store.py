"""Object stores (S3, Azure Blob / ADLS Gen2, GCS) behind the Storage interface, on obstore.

obstore binds the Rust ``object_store`` crate, the one deltalake itself uses, so both libraries see
a store the same way. Commits use put-if-absent (``PutMode.Create``: S3 ``If-None-Match: *``,
Azure and GCS preconditions); a store that cannot do it refuses, it never overwrites.

Options use deltalake's key names (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``,
``AZURE_STORAGE_ACCOUNT_NAME`` ...), so one mapping serves both libraries; anything not given
comes from the cloud's standard environment variables and credential chain. Requests have bounded
timeouts and retries: a wrong endpoint fails in seconds, not minutes. Secrets never reach a message.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlparse

from ..errors import InvalidArgumentError, StorageAccessError
from .file_info import FileInfo, Listed
from .parallel import merged
from .requests import PUT_PART, ObjectRequests, RequestCounter

if TYPE_CHECKING:
    from .s3_copy import S3CopyOutput

__all__ = ["SCHEMES", "ObjectStorage", "redact", "store_options", "task_options"]

#: URL scheme -> the cloud it names (``s3a`` and ``abfss`` as Spark writes them).
SCHEMES = {
    "s3": "aws",
    "s3a": "aws",
    "az": "azure",
    "azure": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "gs": "gcp",
}
_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url"}
#: deltalake-only keys (locking, commit coordination): meaningful to deltalake, unknown to obstore.
_SECRET_WORDS = ("secret", "token", "key", "sas", "password", "signature", "credential")
_TIMEOUTS = {"timeout": "30s", "connect_timeout": "5s"}


def redact(text: str, options: Mapping[str, str]) -> str:
    """``text`` with the value of every secret-looking option replaced by ``***``."""
    for key, value in options.items():
        if value and len(str(value)) >= 4 and any(w in key.lower() for w in _SECRET_WORDS):
            text = text.replace(str(value), "***")
    return text


#: obstore's store settings per cloud (its S3Config, AzureConfig and GCSConfig): anything else in the
#: environment or the options (AWS_CA_BUNDLE, AWS_PROFILE, deltalake's locking keys) is not passed, since
#: obstore refuses an unknown key.
_KNOWN = {
    "aws": frozenset(
        [
            "access_key_id",
            "bucket",
            "checksum_algorithm",
            "container_credentials_relative_uri",
            "container_credentials_full_uri",
            "container_authorization_token_file",
            "copy_if_not_exists",
            "default_region",
            "disable_tagging",
            "disable_bulk_delete",
            "endpoint",
            "metadata_endpoint",
            "region",
            "request_payer",
            "role_arn",
            "role_session_name",
            "secret_access_key",
            "server_side_encryption",
            "session_token",
            "skip_signature",
            "sse_bucket_key_enabled",
            "sse_kms_key_id",
            "sts_endpoint",
            "unsigned_payload",
            "virtual_hosted_style_request",
            "web_identity_token_file",
        ]
    ),
    "azure": frozenset(
        [
            "account_name",
            "account_key",
            "client_id",
            "client_secret",
            "tenant_id",
            "authority_host",
            "sas_key",
            "token",
            "use_emulator",
            "use_fabric_endpoint",
            "endpoint",
            "msi_endpoint",
            "object_id",
            "msi_resource_id",
            "federated_token_file",
            "use_azure_cli",
            "skip_signature",
            "container_name",
            "disable_tagging",
        ]
    ),
    "gcp": frozenset(
        ["service_account", "service_account_key", "base_url", "bearer_token", "bucket", "application_credentials"]
    ),
}
_ALIASES = {"endpoint_url": "endpoint", "storage_account_name": "account_name", "storage_account_key": "account_key"}


def _listed(meta: Mapping[str, Any], strip: int, *, etag: bool = True) -> Listed:
    """One listed object (obstore's metadata) as a ``Listed``, its name relative to the listed folder; without
    ``etag`` its entity tag is not kept (a VACUUM listing of millions of files has no use for it)."""
    mtime_ms = int(meta["last_modified"].timestamp() * 1000)
    return Listed(meta["path"][strip:], int(meta["size"]), mtime_ms, etag=meta.get("e_tag") if etag else None)


def _config_key(key: str, cloud: str) -> str | None:
    """obstore's name for a deltalake option key of ``cloud``; None when it is not a store setting."""
    prefix = {"aws": "aws_", "azure": "azure_", "gcp": "google_"}[cloud]
    k = key.lower()
    if not k.startswith(prefix):
        return None
    short = k.removeprefix(prefix)
    short = _ALIASES.get(short, short.removeprefix("storage_") if cloud == "azure" else short)
    return short if short in _KNOWN[cloud] else None


def store_options(cloud: str, options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    """(store config, client options) for obstore from deltalake-style ``options``."""
    config: dict[str, str] = {}
    client: dict[str, Any] = dict(_TIMEOUTS)
    # Client options given here replace obstore's own reading of the environment: keep the cloud's flag.
    env_prefix = {"aws": "AWS_", "azure": "AZURE_", "gcp": "GOOGLE_"}[cloud]
    allow = os.environ.get(env_prefix + "ALLOW_HTTP", os.environ.get("ALLOW_HTTP"))
    if allow is not None:
        client["allow_http"] = allow.strip().lower() in ("true", "1")
    for key, value in options.items():
        k = key.lower()
        short = k.split("_", 1)[1] if k.startswith(("aws_", "azure_", "google_")) else k
        if short in _CLIENT_KEYS:
            client[short] = str(value).lower() in ("true", "1") if short.startswith("allow") else value
            continue
        name = _config_key(k, cloud)
        if name is not None:
            config[name] = str(value)
    return config, client


def task_options(base: str, options: Mapping[str, str]) -> dict[str, str]:
    """The options code in a Spark task needs to open ``base``: the cloud's environment variables of
    this process (executors do not inherit them) under the explicit ``options``."""
    cloud = SCHEMES.get(urlparse(base).scheme)
    if cloud is None:
        return dict(options)
    prefix = {"aws": "AWS_", "azure": "AZURE_", "gcp": "GOOGLE_"}[cloud]
    merged = {**{k: v for k, v in os.environ.items() if k.startswith(prefix)}, **options}
    emulator = os.environ.get("AZURITE_BLOB_STORAGE_URL")
    if cloud == "azure" and emulator and "AZURE_ENDPOINT" not in merged:  # Azurite's URL is an env-only setting
        account = merged.get("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1")
        merged["AZURE_ENDPOINT"] = f"{emulator.rstrip('/')}/{account}"
        merged.pop("AZURE_STORAGE_USE_EMULATOR", None)
    return merged


class _Reader(io.RawIOBase):
    """An obstore ReadableFile as a seekable binary file (pyarrow's Parquet reader wants one)."""

    def __init__(self, reader: Any, requests: RequestCounter | None = None) -> None:
        self._reader = reader
        self._requests = requests

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = bytes(self._reader.read(len(buffer)))
        buffer[: len(data)] = data
        if self._requests is not None and data:  # the buffered reader above asks only for what it lacks
            self._requests.count("RANGE_GET", read=len(data))
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._reader.seek(offset, whence))

    def tell(self) -> int:
        return int(self._reader.tell())

    def close(self) -> None:
        self._reader.close()
        super().close()


class _Writer(io.RawIOBase):
    """An obstore WritableFile as a binary file whose failures are our typed storage errors."""

    def __init__(self, writer: Any, fail: Any, uploaded: Callable[[int], None] | None = None) -> None:
        self._writer = writer
        self._fail = fail
        self._written = 0
        self._uploaded = uploaded

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            self._writer.write(bytes(data))
        except Exception as exc:
            raise self._fail(exc) from None
        n = len(memoryview(data))
        self._written += n
        return n

    def tell(self) -> int:
        return self._written

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._writer.close()
        except Exception as exc:
            raise self._fail(exc) from None
        finally:
            super().close()
        if self._uploaded is not None:
            self._uploaded(self._written)


@dataclass(frozen=True)
class ObjectStorage:
    """One bucket (S3, GCS) or container (Azure); paths are full URLs inside it."""

    base: str  #: scheme://bucket[/...]: any URL of the store, normally the table root
    _options: Mapping[str, str] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: what this call asked of the store (``delta/requests.py``); a task's view shares ``_cache``, not this
    requests: RequestCounter = field(default_factory=RequestCounter, compare=False, repr=False)

    @property
    def options(self) -> Mapping[str, str]:
        return self._options

    # ------------------------------------------------------------------ plumbing
    @property
    def _bucket_url(self) -> str:
        u = urlparse(self.base)  # the netloc is the bucket, or container@account.dfs.core.windows.net (abfss)
        return f"{u.scheme}://{u.netloc}"

    @property
    def _store(self) -> Any:
        if "store" not in self._cache:
            self._cache["store"] = self._build()
        return self._cache["store"]

    def _build(self) -> Any:
        from obstore import store

        from_url: Any = store.from_url  # typed per cloud by overloads; the settings are checked by obstore
        cloud = SCHEMES[urlparse(self.base).scheme]
        config, client = store_options(cloud, self._options)
        url = self._bucket_url.replace("s3a://", "s3://", 1)
        retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=20)}
        try:
            return from_url(url, config=config or None, client_options=client, retry_config=retry)
        except BaseException as exc:  # obstore panics (PanicException) on some malformed settings
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            raise InvalidArgumentError(
                f"Cannot open the object store of '{self.base}': {redact(str(exc).splitlines()[0], self._options)}. "
                "Check the URL and the storage options."
            ) from None

    def key(self, path: str) -> str:
        """The object key of a full URL (relative to the bucket or container)."""
        prefix = self._bucket_url.rstrip("/") + "/"
        if not path.startswith(prefix):
            if path.rstrip("/") == self._bucket_url.rstrip("/"):
                return ""
            raise InvalidArgumentError(f"'{path}' is not in the store of '{self.base}'.")
        return path[len(prefix) :]

    def _fail(self, exc: Exception, path: str) -> Exception:
        """Our typed error for an obstore failure, decided by obstore's exception type (never its text).

        A missing object is the builtin FileNotFoundError; refused credentials or a missing capability a
        StorageAccessError that will not go away by itself; a bad key or setting an InvalidArgumentError;
        anything else (obstore's GenericError: no answer, a timeout, throttling or a server error after
        the client's retries) a retryable StorageAccessError.
        """
        from obstore.exceptions import (
            InvalidPathError,
            NotFoundError,
            NotSupportedError,
            PermissionDeniedError,
            UnauthenticatedError,
            UnknownConfigurationKeyError,
        )

        text = redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, self._options)
        if isinstance(exc, (NotFoundError, FileNotFoundError)):  # obstore raises the builtin for a missing object
            return FileNotFoundError(path)
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
            return StorageAccessError(
                f"Access to '{path}' was denied ({text}). Check the credentials (environment variables or "
                "--storage-option) and that they may read and write this location."
            )
        if isinstance(exc, NotSupportedError):
            return StorageAccessError(f"The store of '{path}' cannot do what was asked ({text}).")
        if isinstance(exc, (InvalidPathError, UnknownConfigurationKeyError)):
            return InvalidArgumentError(f"The object store refused '{path}' ({text}). Check the path and the options.")
        return StorageAccessError(
            f"The object store at '{self._bucket_url}' could not be reached or did not complete the request for "
            f"'{path}' ({text}). Nothing was written; this may succeed later. Check the endpoint, the network and "
            "the storage options.",
            retryable=True,
        )

    @property
    def _counts(self) -> ObjectRequests:
        """This call's counter, with how obstore's calls turn into requests on this cloud."""
        return ObjectRequests(self.requests, SCHEMES[urlparse(self.base).scheme])

    def _call(self, path: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        store = self._store
        self._counts.call(getattr(fn, "__name__", ""), args)
        try:
            return fn(store, *args, **kwargs)
        except InvalidArgumentError:
            raise
        except Exception as exc:
            raise self._fail(exc, path) from None

    # ------------------------------------------------------------------ Storage
    def put_if_absent(self, path: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

        store = self._store
        self.requests.count("PUT", written=len(data))
        try:
            obstore.put(store, self.key(path), data, mode="create")
            return True
        except (AlreadyExistsError, PreconditionError):
            return False
        except NotSupportedError as exc:
            raise StorageAccessError(
                f"The store of '{path}' cannot write a file only if it is absent ({exc}); committing there could "
                "overwrite another writer's commit, so nothing was written."
            ) from None
        except Exception as exc:
            raise self._fail(exc, path) from None

    def write_bytes(self, path: str, data: bytes) -> None:
        import obstore

        self._call(path, obstore.put, self.key(path), data)
        self._counts.upload(len(data), PUT_PART)

    def put_file(self, path: str, local: str) -> None:
        """Upload a local file (multipart when large)."""
        import obstore

        with open(local, "rb") as fh:
            self._call(path, obstore.put, self.key(path), fh)
        self._counts.upload(os.path.getsize(local), PUT_PART)

    def read_bytes(self, path: str) -> bytes:
        import obstore

        data = bytes(self._call(path, obstore.get, self.key(path)).bytes())
        self.requests.count("GET", 0, read=len(data))
        return data

    def open_input(self, path: str) -> BinaryIO:
        import obstore

        reader = self._call(path, obstore.open_reader, self.key(path))
        return io.BufferedReader(_Reader(reader, self.requests), buffer_size=1 << 20)

    def open_output(self, path: str) -> BinaryIO:
        """A streaming multipart upload: parts go up while the file is written, none of it lands on disk."""
        import obstore

        writer = self._call(path, obstore.open_writer, self.key(path), buffer_size=8 << 20)
        uploaded = partial(self._counts.upload, part=8 << 20)
        return io.BufferedWriter(_Writer(writer, lambda exc: self._fail(exc, path), uploaded), buffer_size=1 << 20)

    def open_copy_output(self, path: str, root: str) -> S3CopyOutput | None:
        """An S3 upload of ``path`` that can copy byte ranges of the files under ``root`` inside the store
        (``delta/s3_copy.py``); None on other clouds, or without botocore."""
        if SCHEMES[urlparse(self.base).scheme] != "aws":
            return None
        from .s3_copy import S3CopyOutput, s3_connector

        if "s3_connect" not in self._cache:
            merged = {**{k: v for k, v in os.environ.items() if k.startswith("AWS_")}, **self._options}
            self._cache["s3_connect"] = s3_connector(*store_options("aws", merged))
        if self._cache["s3_connect"] is None:
            return None
        bucket = urlparse(self.base).netloc
        fail: Callable[[Exception], Exception] = lambda exc: self._fail(exc, path)  # noqa: E731
        state = self._cache.setdefault("s3_copy_state", {})
        return S3CopyOutput(self._s3_client, bucket, self.key(path), self.key(root), fail, store_state=state)

    def _s3_client(self) -> Any:
        """The store's one botocore client (thread-safe), made on the first server-side copy's first request."""
        if "s3_client" not in self._cache:
            self._cache["s3_client"] = self._cache["s3_connect"]()
        return self._cache["s3_client"]

    def exists(self, path: str) -> bool:
        import obstore

        key, store = self.key(path), self._store
        if key:
            self.requests.count("HEAD")
            try:
                obstore.head(store, key)
                return True
            except Exception as exc:
                failure = self._fail(exc, path)
                if not isinstance(failure, FileNotFoundError):
                    raise failure from None
        self.requests.count("LIST")
        try:
            listing = obstore.list_with_delimiter(store, (key.rstrip("/") + "/") if key else None)
        except Exception as exc:
            failure = self._fail(exc, path)
            if key and isinstance(failure, StorageAccessError) and failure.retryable:
                # The store just answered the HEAD (not found), so it is reachable: a listing it refuses is
                # of a bucket or container that does not exist (object_store types that only as generic).
                return False
            raise failure from None
        return bool(listing["objects"] or listing["common_prefixes"])

    def stat(self, path: str) -> FileInfo:
        import obstore

        meta = self._call(path, obstore.head, self.key(path))
        return FileInfo(int(meta["size"]), int(meta["last_modified"].timestamp() * 1000))

    def list_dir(self, path: str) -> Iterator[str]:
        import obstore

        key = self.key(path).rstrip("/")
        listing = self._call(path, obstore.list_with_delimiter, (key + "/") if key else None)
        self._counts.more_pages(len(listing["objects"]) + len(listing["common_prefixes"]))
        names = {o["path"].rsplit("/", 1)[-1] for o in listing["objects"]}
        names |= {p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]}
        yield from sorted(names)

    def makedirs(self, path: str) -> None:
        """Object stores have no folders."""

    def delete(self, path: str) -> None:
        import obstore

        store = self._store
        self._counts.deletes(1)
        try:
            obstore.delete(store, self.key(path))
        except Exception as exc:
            if not isinstance(self._fail(exc, path), FileNotFoundError):
                raise self._fail(exc, path) from None

    def delete_tree(self, path: str) -> None:
        import obstore

        prefix = self.key(path).rstrip("/") + "/"
        self.requests.count("LIST")
        for chunk in self._call(path, obstore.list, prefix):
            for meta in chunk:
                self.delete(f"{self._bucket_url}/{meta['path']}")

    def rename(self, src: str, dst: str) -> None:
        import obstore

        self._call(src, obstore.rename, self.key(src), self.key(dst))

    def is_empty_dir(self, path: str) -> bool:
        return not any(True for _ in self.list_dir(path))

    # ------------------------------------------------------------------ bulk (VACUUM)
    def _list_prefix(
        self, path: str, key_prefix: str, strip: int, *, offset: str | None = None, etags: bool = False
    ) -> Generator[Listed, None, None]:
        """A streamed listing of ``key_prefix`` (from ``offset`` on when given), page by page, counted."""
        import obstore

        pages = self._counts.pages()
        extra = {} if offset is None else {"offset": offset}
        try:
            for chunk in obstore.list(self._store, key_prefix, chunk_size=1000, **extra):
                pages.got(len(chunk))
                for meta in chunk:
                    yield _listed(meta, strip, etag=etags)
        except InvalidArgumentError:
            raise
        except Exception as exc:
            raise self._fail(exc, path) from None
        finally:
            pages.close()

    def walk(self, path: str, skip: Callable[[str], bool], *, by_prefix: bool = True) -> Iterator[Listed]:
        """One listing of the top level, then one streamed listing per top-level prefix, in parallel; without
        ``by_prefix`` (a table without partition folders) one streamed listing of everything, whose
        hidden top-level names are dropped here (a delimiter listing costs a full scan on some servers)."""
        key = self.key(path).rstrip("/")
        prefix = (key + "/") if key else ""
        if not by_prefix:
            for entry in self._list_prefix(path, prefix, len(prefix)):
                if not skip(entry.path.split("/", 1)[0]):
                    yield entry
            return
        files, folders = self.list_top(path, skip)
        yield from files
        yield from merged(
            [partial(self._list_prefix, path, prefix + f + "/", len(prefix)) for f in folders],
            threads=8,
        )

    def list_top(self, path: str, skip: Callable[[str], bool]) -> tuple[list[Listed], list[str]]:
        """One delimiter listing: the objects directly under ``path``, and its common prefixes (folders)."""
        import obstore

        key = self.key(path).rstrip("/")
        prefix = (key + "/") if key else ""
        top = self._call(path, obstore.list_with_delimiter, prefix or None)
        self._counts.more_pages(len(top["objects"]) + len(top["common_prefixes"]))
        strip = len(prefix)
        files = [_listed(o, strip) for o in top["objects"] if not skip(o["path"][strip:])]
        folders = [f for p in top["common_prefixes"] if not skip(f := p.rstrip("/")[strip:])]
        return files, folders

    def list_after(self, path: str, after: str, *, below: str | None = None) -> list[Listed]:
        """One listing from ``after`` on (S3 ``start-after``; elsewhere obstore filters what the store lists),
        read page by page until a name reaches ``below``: the objects directly under ``path``, in name order."""
        key = self.key(path).rstrip("/")
        prefix = (key + "/") if key else ""
        found: list[Listed] = []
        with closing(self._list_prefix(path, prefix, len(prefix), offset=prefix + after, etags=True)) as listed:
            for entry in listed:
                if below is not None and entry.path >= below:
                    break
                if "/" not in entry.path and entry.path > after:
                    found.append(entry)
        return sorted(found, key=lambda f: f.path)

    def delete_many(self, paths: Sequence[str]) -> int:
        """obstore's bulk delete (S3 DeleteObjects of up to 1,000 keys; one request per key elsewhere),
        in chunks run in parallel."""
        from concurrent.futures import ThreadPoolExecutor

        import obstore

        keys = [self.key(p) for p in paths]
        chunks = [keys[i : i + 1000] for i in range(0, len(keys), 1000)]

        def run(chunk: list[str]) -> int:
            try:
                self._call(self.base, obstore.delete, chunk)
            except FileNotFoundError:  # a store that reports a missing key in a batch: one by one, missing skipped
                for k in chunk:
                    self.delete(f"{self._bucket_url}/{k}")
            return len(chunk)

        if len(chunks) <= 1:
            return sum(run(c) for c in chunks)
        with ThreadPoolExecutor(min(8, len(chunks))) as pool:
            return sum(pool.map(run, chunks))

    def remove_empty_dir(self, path: str) -> bool:
        """Object stores have no folders."""
        return False
