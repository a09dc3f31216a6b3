"""How a setting's value is written: sizes (``128m``), durations (``30s``), intervals (``7d``), flags.

Each parser names the setting in its error and says what it expects, so a bad meta key, flag or conf
is refused with the fix. Part of ``options``, apart so the declaration stays readable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidConfigError

GiB = 1024**3
MiB = 1024**2
#: The largest size Delta can record (sizes are Java longs in the log and in Spark confs).
MAX_SIZE = 2**63 - 1

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": MiB, "mb": MiB, "g": GiB, "gb": GiB}
_UNITS.update({"t": 1024**4, "tb": 1024**4, "p": 1024**5, "pb": 1024**5})
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")
_DURATION_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _size_error(key: str, value: Any, why: str = "") -> InvalidConfigError:
    return InvalidConfigError(
        f"{key} must be a size like 128m, 1g or a whole number of bytes{why}, got {value!r}. "
        "Units are binary (k, m, g, t, p; an optional trailing b) and fractions are refused, as in Spark."
    )


def parse_size(value: Any, *, key: str = "size") -> int:
    """Parse a byte size as Spark's bytes confs do: ``128m``, ``1g``, ``1024`` (bytes). Binary units.

    Strict like Spark's ``JavaUtils.byteStringAs``: a whole number and a unit, so ``1.5g`` is
    refused (Spark refuses it too), and the result must fit in a long, as Delta stores sizes.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _size_error(key, value)
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE_RE.match(value)
        if not m or m.group(2).lower() not in _UNITS:
            raise _size_error(key, value)
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n < 0:
        raise _size_error(key, value, " (not negative)")
    if n > MAX_SIZE:
        raise _size_error(key, value, f" up to {MAX_SIZE} (a long)")
    return n


def format_size(n: int | float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def parse_bool(value: Any, *, key: str) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().strip("'\"").lower()
    if s in ("true", "false"):
        return s == "true"
    raise InvalidConfigError(f"{key} must be true or false, got {value!r}.")


def parse_int(value: Any, *, key: str, minimum: int) -> int:
    """A whole number (or its text) of at least ``minimum``; booleans and fractions are refused."""
    error = InvalidConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}.")
    if isinstance(value, bool):
        raise error
    try:
        n = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise error from None
    if n < minimum:
        raise error
    return n


def parse_ratio(value: Any, *, key: str) -> float:
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key} must be a number between 0 and 1, got {value!r}.") from None
    if isinstance(value, bool) or not 0.0 <= r <= 1.0:
        raise InvalidConfigError(f"{key} must be a number between 0 and 1, got {value!r}.")
    return r


def parse_duration(value: Any, *, key: str) -> float:
    """Seconds from ``25s``, ``10m``, ``1h`` or a number of seconds (> 0, at most a week)."""
    text = str(value).strip().lower()
    unit = text.lstrip("0123456789.")
    number = text[: len(text) - len(unit)] if unit else text
    try:
        if isinstance(value, bool) or unit.strip() not in ("", *_DURATION_UNITS):
            raise ValueError
        seconds = float(number) * _DURATION_UNITS.get(unit.strip(), 1.0)
    except ValueError:
        raise InvalidConfigError(f"{key} must be a duration like 25s, 10m or 1h, got {value!r}.") from None
    if not 0 < seconds <= 7 * 86400:
        raise InvalidConfigError(f"{key} must be a duration between 1s and 7 days, got {value!r}.")
    return seconds


_INTERVAL_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_INTERVAL_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_interval(value: Any, *, key: str) -> int:
    """Milliseconds of an interval of any length: ``7d``, ``12h``, ``1w``, ``30m``, ``90s`` (a number: hours)."""
    m = _INTERVAL_RE.match(str(value).lower()) if not isinstance(value, bool) else None
    if m is None or float(m.group(1)) <= 0:
        raise InvalidConfigError(f"{key} must be an interval like 7d, 12h or 1w (more than 0), got {value!r}.")
    return round(float(m.group(1)) * _INTERVAL_UNITS[m.group(2) or "h"])


#: Units of a Delta table property interval (``interval 7 days``), as delta-spark's ``DeltaConfigs`` read them.
_DELTA_INTERVAL_UNITS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60 * 1000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Delta table property interval such as ``interval 7 days`` (``DeltaConfigs.getMilliSeconds``).

    Months and years are refused by delta-spark for these properties too (they have no fixed length).
    """
    words = str(text).strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        raise ValueError(f"not an interval: {text!r}")
    total = 0
    for number, unit in zip(words[::2], words[1::2]):
        unit = unit.rstrip("s") if unit not in ("ms",) else "millisecond"
        if unit not in _DELTA_INTERVAL_UNITS:
            raise ValueError(f"not an interval: {text!r}")
        total += round(float(number) * _DELTA_INTERVAL_UNITS[unit])
    return total


def parse_choice(value: Any, *, key: str, choices: Sequence[str]) -> str:
    s = str(value).strip().lower()
    if s not in choices:
        raise InvalidConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}.")
    return s


def parse_every(value: Any, *, key: str) -> tuple[int | None, float | None]:
    """An integer is a number of bins; a duration (``30s``, ``5m``) a period. Bytes are ``batch_size``."""
    text = str(value).strip()
    if text.isdigit() and not isinstance(value, bool):
        return parse_int(text, key=key, minimum=1), None
    return None, parse_duration(value, key=key)


def metric_int(value: Any) -> int | None:
    """A commit metric as an integer: an int, a whole float, or one written as a string (delta-spark writes its
    operationMetrics as strings); anything else (a flag, text) is None, so a writer's odd metric is skipped."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None
