"""The local files a command will write (reports, pages, state), checked before any table is opened.

A report that cannot be written after the work is work done and then lost, and a raw ``OSError`` at
the end: every front end checks its output paths here first, and refuses with one ``OutputPathError``
(exit 2) naming the option, the path and the fix. The check really tries: ``os.access`` says yes to
root everywhere (``/proc``, a read-only mount), so the file is opened for appending (nothing written)
or, when missing, a sibling of our own is created and removed (never the path itself: another writer
may be putting it there at that moment).
"""

from __future__ import annotations

import errno
import os
import uuid

from ..errors import OutputPathError

__all__ = ["check_output"]


def _refuse(option: str, path: str, problem: str, fix: str) -> OutputPathError:
    return OutputPathError(f"{option} {path}: {problem}; {fix}.", option=option, path=path)


def _reason(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)


def _probe(full: str) -> None:
    """Open ``full`` as a write would, without changing it or anything another writer may put there.

    An existing file is opened for appending (nothing written). A missing one is never created: a
    sibling of our own (``<name>.<random>.probe``, as long as the writers' temporary files) is created
    and removed. Creating and removing ``full`` itself would race a concurrent writer (dbt's threads
    append results through ``os.replace``): the removal could delete the file it had just put there.
    """
    if os.path.exists(full):
        with open(full, "ab"):
            return
    sibling = f"{full}.{uuid.uuid4().hex[:12]}.probe"
    fd = os.open(sibling, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    os.remove(sibling)


def check_output(path: str, *, option: str, make_folder: bool = False) -> str:
    """The absolute path ``path`` will be written to; OutputPathError if it cannot be.

    Refused: a folder, a folder that does not exist (unless ``make_folder``: then it is created, as the
    writer would), a folder or file that takes no writes. ``option`` names where the path came from
    (``--html``, ``target path``), for the message.
    """
    full = os.path.abspath(os.path.expanduser(path))
    folder = os.path.dirname(full)
    if os.path.isdir(full):
        raise _refuse(option, path, "is a folder", "name a file (e.g. inside it)")
    if make_folder:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise _refuse(
                option, path, f"its folder {folder} cannot be created ({_reason(exc)})", "choose a writable folder"
            ) from exc
    elif not os.path.isdir(folder):
        problem = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise _refuse(option, path, f"its folder {folder} {problem}", "create the folder or choose another path")
    try:
        _probe(full)
    except OSError as exc:
        raise _refuse(
            option, path, f"cannot be written ({_reason(exc)})", "choose a path in a writable folder"
        ) from exc
    return full
