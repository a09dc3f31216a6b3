"""Where new files go: always under the table root, in the folder the partition values give.

The folder is computed from the bin's partition values with Hive-style escaping, never taken from
an input file's path: a log entry may name a file anywhere (an absolute path of a shallow clone, or
a hostile ``../``), but what we write stays inside the table. The log path is the URI-encoded
relative path, as delta-spark writes it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote

from ..delta.storage import LocalStorage, Storage, join, local_path
from ..errors import UnsafePathError

__all__ = ["HIVE_DEFAULT_PARTITION", "check_output_folders", "hive_dir", "new_file_location"]

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_HIVE_ESCAPE = set("\"#%'*/:=?\\{[]^") | {chr(c) for c in range(0x01, 0x20)} | {chr(0x7F)}


def _hive_escape(value: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _HIVE_ESCAPE else ch for ch in value)


def hive_dir(values: Mapping[str, str | None], columns: Sequence[str]) -> str:
    """``col=value/...`` for the partition values (null and "" are the Hive default partition)."""
    parts = []
    for c in columns:
        v = values.get(c)
        parts.append(f"{_hive_escape(c)}={_hive_escape(v) if v else HIVE_DEFAULT_PARTITION}")
    return "/".join(parts)


def new_file_location(
    root: str, values: Mapping[str, str | None], columns: Sequence[str], name: str
) -> tuple[str, str, str]:
    """(location to write, path as written in the log, relative folder) of a new file of a partition."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a file name: {name!r}")
    rel_dir = hive_dir(values, columns)
    log_dir = quote(rel_dir, safe="/=!$&'()*+,;:@-._~")
    dest = join(root, rel_dir, name) if rel_dir else join(root, name)
    return dest, (f"{log_dir}/{name}" if log_dir else name), rel_dir


def check_output_folders(storage: Storage, root: str, folders: Iterable[str]) -> None:
    """Refuse before any write if a partition folder resolves outside the table (a symbolic link out).

    The folder names are safe by construction; on a local file system an existing link in the
    table (``part=a -> /elsewhere``) would still carry our files out of it. Object stores have no links.
    """
    if not isinstance(storage, LocalStorage):
        return
    real_root = os.path.realpath(local_path(root))
    for rel in folders:
        real = os.path.realpath(os.path.join(real_root, rel)) if rel else real_root
        if os.path.commonpath([real, real_root]) != real_root:
            raise UnsafePathError(
                f"Partition folder '{rel}' of '{root}' resolves to '{real}', outside the table (a symbolic link). "
                "Nothing was written. Replace the link with a real folder, or optimize the table at its real location.",
                path=rel,
            )
