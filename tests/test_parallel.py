"""The bounded producers of ``delta/parallel.py``: every item once, errors raised, no thread left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from dbt_delta_optimize.delta.parallel import Prefetched, merged


def _count(n: int) -> Iterator[int]:
    yield from range(n)


def _threads() -> int:
    return threading.active_count()


def test_prefetched_gives_every_item_in_order_across_chunks():
    with Prefetched(lambda: _count(2_345), buffer=1_000, chunk=100) as items:
        assert list(items) == list(range(2_345))


def test_prefetched_closed_unread_joins_its_thread_even_when_its_queue_is_full():
    before = _threads()
    p = Prefetched(lambda: _count(1_000_000), buffer=10, chunk=5)  # blocks on the full queue
    p.close()
    assert _threads() == before


def test_prefetched_raises_the_producers_error():
    def broken() -> Iterator[int]:
        yield 1
        raise OSError("listing failed")

    with Prefetched(broken, chunk=1) as items, pytest.raises(OSError, match="listing failed"):
        list(items)


def test_merged_gives_every_item_of_every_producer_once():
    got = list(merged([lambda i=i: range(i * 100, i * 100 + 100) for i in range(5)], threads=3, buffer=7))
    assert sorted(got) == list(range(500))
