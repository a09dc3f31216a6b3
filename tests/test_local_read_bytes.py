"""LocalStorage.read_bytes reads a file with one fstat and one read: the same bytes as ``open().read()``
whatever the size, on a mount that returns short reads too, and errors that name the file. No Spark."""

from __future__ import annotations

import os

import pytest

from dbt_delta_optimize.delta import storage as storage_module
from dbt_delta_optimize.delta.storage import LocalStorage


@pytest.mark.parametrize("size", [0, 1, 5_500, 65_536, 1_048_579])
def test_the_same_bytes_as_a_buffered_read_and_counted(tmp_path, size):
    path = tmp_path / "f.parquet"
    path.write_bytes(os.urandom(size))
    storage = LocalStorage()
    assert storage.read_bytes(str(path)) == path.read_bytes()
    assert storage.requests.to_dict()["bytesRead"] == size


def test_short_reads_are_read_on_to_the_end(tmp_path, monkeypatch):
    # A network or FUSE mount may return fewer bytes than asked before the end of the file.
    data = os.urandom(200_000)
    path = tmp_path / "f.parquet"
    path.write_bytes(data)
    real_read = os.read
    calls = []

    def short_read(fd: int, n: int) -> bytes:
        calls.append(n)
        return real_read(fd, min(n, 7_000))

    monkeypatch.setattr(storage_module.os, "read", short_read)
    assert LocalStorage().read_bytes(str(path)) == data
    assert len(calls) > 2


def test_a_missing_file_and_a_folder_raise_naming_the_path(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        LocalStorage().read_bytes(str(tmp_path / "gone.parquet"))
    assert missing.value.filename == str(tmp_path / "gone.parquet")
    with pytest.raises(IsADirectoryError) as folder:
        LocalStorage().read_bytes(str(tmp_path))
    assert folder.value.filename == str(tmp_path)
