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

__all__ = ["AzureServer", "S3Server", "azurite", "free_port", "moto_s3"]


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
