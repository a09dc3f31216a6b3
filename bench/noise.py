"""When a ratio is worse than recorded by more than the run-to-run noise ``make bench`` measures itself.

Each benchmark repeats every engine in alternating order, so each repeat gives one ratio (ours / the
reference, measured back to back). The spread of those per-repeat ratios, relative to their median, is
the noise of this run: on a shared 2-core machine it is often 10-20%. A ratio is flagged REGRESSED only
when it is worse than the recorded one by more than ``max(FLOOR, K x spread)``, where the spread is the
larger of this run's and the one recorded with the baseline (a noisy baseline is as uncertain as a noisy
run).

``K = 1.5``: with three repeats the range is about 1.7 standard deviations of one measurement, and the
difference of two medians of three has a standard deviation of about 0.95 of one, so 1.5 x the range is
about 2.7 standard deviations of the difference: a change this large is rarely noise.

Pure functions, unit-tested in tests/test_bench_noise.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["FLOOR", "K", "ratios", "regressed", "relative_spread", "tolerance"]

#: Never flag less than this (10%), however quiet the run.
FLOOR = 0.10
#: Flag beyond this many times the observed relative spread of the repeats.
K = 1.5


def ratios(ours: Sequence[float], reference: Sequence[float]) -> list[float]:
    """The per-repeat ratios ours / reference (repeat i of each engine ran back to back)."""
    return [a / b for a, b in zip(ours, reference) if b > 0]


def relative_spread(samples: Sequence[float]) -> float:
    """(max - min) / median of the per-repeat ratios; 0 with fewer than two (no noise measured)."""
    if len(samples) < 2:
        return 0.0
    mid = statistics.median(samples)
    return (max(samples) - min(samples)) / mid if mid > 0 else 0.0


def tolerance(spread: float, recorded_spread: float = 0.0) -> float:
    """How much worse than recorded (a fraction: 0.10 is 10%) a ratio may be before it is flagged."""
    return max(FLOOR, K * max(spread, recorded_spread))


def regressed(value: float, recorded: float | None, spread: float, recorded_spread: float = 0.0) -> bool:
    """Whether ``value`` (lower is better) is worse than ``recorded`` beyond the noise."""
    if not recorded:
        return False
    return value > recorded * (1 + tolerance(spread, recorded_spread))
