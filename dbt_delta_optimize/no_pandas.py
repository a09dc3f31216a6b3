"""pyarrow without pandas, in the processes this package owns: the CLI's and the bin workers'.

pyarrow imports pandas, when it is installed, the first time it converts Python values (``pa.array`` of a list,
``pa.scalar``, a compute function given a Python number). pandas comes with us (Spark's ``mapInArrow`` needs
it) and its import takes 0.2-0.3 s: in a fresh ``optimize`` of 5,000 tiny files it was paid twice, in the
driver and in the fork server the bin workers fork from (docs/performance.md, "Issue 45, a fresh process
without pandas"). Nothing of ours hands pyarrow a pandas object, so ``block`` refuses pandas to the process;
pyarrow then goes on without its pandas integration. Starting a Spark session lifts the refusal
(``engine.session`` calls ``unblock``: PySpark needs pandas).

Only in processes we own: in a user's session pyarrow, once refused, would take a pandas Series for a plain
sequence until something imports pandas through it again.

``numpy_hidden`` is the same for numpy, for a while: what is imported meanwhile (pyarrow, in a spark-free VACUUM
and in the bin workers' fork server) loads without it. ``one_blas_thread`` keeps numpy's OpenBLAS to one thread
in those processes, and ``no_huge_pages`` Arrow's allocator to the system's usual pages.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = [
    "PYARROW_MODULES",
    "block",
    "blocked",
    "load_pyarrow_without_numpy",
    "no_huge_pages",
    "numpy_hidden",
    "one_blas_thread",
    "unblock",
]


class _Refusal:
    """A finder first on ``sys.meta_path`` that refuses pandas and nothing else."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            message = f"No module named {fullname!r} in this process (dbt_delta_optimize.no_pandas)"
            raise ModuleNotFoundError(message, name=fullname)
        return None


_REFUSAL = _Refusal()


def block() -> bool:
    """Refuse pandas to this process from now on; False (nothing done) when it, or PySpark, is imported already."""
    if "pandas" in sys.modules or "pyspark" in sys.modules:
        return False
    if _REFUSAL not in sys.meta_path:
        sys.meta_path.insert(0, _REFUSAL)
    return True


def blocked() -> bool:
    """Whether pandas is refused to this process now (``block`` was called, and no ``unblock`` since)."""
    return _REFUSAL in sys.meta_path


def unblock() -> None:
    """Let pandas be imported again. pyarrow, which found none meanwhile, would otherwise miss pandas objects
    until something imports pandas through it: that is done here, once, if pyarrow is imported."""
    if not blocked():
        return
    sys.meta_path.remove(_REFUSAL)  # ``block`` inserts it once
    lib = sys.modules.get("pyarrow.lib")
    if lib is not None:
        try:
            lib._pandas_api.pd  # noqa: B018 - imports pandas (its integration's own retry)
        except Exception:  # pandas not installed: pyarrow has no integration to restore
            pass


@contextmanager
def numpy_hidden() -> Iterator[None]:
    """numpy cannot be imported while this runs (pyarrow, imported meanwhile, loads without its numpy
    integration, which it supports since 16), and can be again after it."""
    sys.modules["numpy"] = None  # type: ignore[assignment]  # an import of it fails while this is here
    try:
        yield
    finally:
        if "numpy" in sys.modules and sys.modules["numpy"] is None:
            del sys.modules["numpy"]


#: The pyarrow modules a bin (and the driver's planning) uses, loaded while numpy is hidden (each imports numpy
#: when it can).
PYARROW_MODULES = ("pyarrow", "pyarrow.parquet", "pyarrow._compute")


def load_pyarrow_without_numpy() -> bool:
    """Import ``PYARROW_MODULES`` with numpy hidden, then let numpy be imported again; False (nothing done)
    when pyarrow or numpy is loaded already. Afterwards ``Array.to_numpy`` and ``pa.array(ndarray)`` raise in
    this process (and in what it forks): only code that hands pyarrow no numpy object may run in it."""
    if "pyarrow" in sys.modules or "numpy" in sys.modules:
        return False
    with numpy_hidden():
        for name in PYARROW_MODULES:
            __import__(name)
    return True


def one_blas_thread() -> None:
    """One OpenBLAS thread for the console script's process and what it starts (its bin workers' fork server, an
    embedded Spark's Python workers), unless the user set it. numpy's OpenBLAS starts a thread per core as it
    loads (pyarrow loads numpy), and they spin: about 0.09 s of CPU in the CLI's process and as much in the
    fork server, on a 2-core machine the very cores their imports need (docs/performance.md, "Issue 45, the log
    read once"). Nothing we run calls BLAS."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def no_huge_pages() -> None:
    """No transparent huge pages for Arrow's allocator (mimalloc, pyarrow's default pool) in the console script's
    process and what it starts, unless the user set it; read as pyarrow loads, so called before. mimalloc asks
    the kernel for 2 MB pages, and each first touch of one zeroes it in the kernel, after a compaction of memory
    when none is free: in a fresh ``optimize`` of 5,000 tiny files that was 0.25-0.5 s of kernel time across
    the driver and its bin workers, on cores the bins need (docs/performance.md, "Issue 45, huge pages and
    forking the workers from the CLI"). Arrow's buffers here are a few MB at a time; 4 KB pages serve them."""
    os.environ.setdefault("MIMALLOC_ALLOW_THP", "0")
