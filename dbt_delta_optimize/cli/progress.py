"""The progress bar of ``optimize``: bins done of total (labelled bins) and bytes rewritten (labelled as sizes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .format import human_size

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = ["OptimizeProgress"]


class OptimizeProgress:
    """A rich progress bar on ``console`` (None: silent), fed by the executor's progress callback.

    Shows e.g. ``optimizing ━━━━━━━━ 2/3 bins  1.0 KiB of 3.0 KiB  0:00:01``: the bins count
    is labelled bins and the bytes are sizes, never one printed as the other.
    """

    def __init__(self, console: Console | None) -> None:
        self._console = console
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> OptimizeProgress:
        if self._console is not None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("optimizing"),
                BarColumn(),
                TextColumn("{task.completed:.0f}/{task.total:.0f} bins"),
                TextColumn("{task.fields[sizes]}"),
                TimeElapsedColumn(),
                console=self._console,
            )
            self._bar.__enter__()
        return self

    def __call__(self, bins_done: int, bins_total: int, bytes_done: int, bytes_total: int) -> None:
        if self._bar is None:
            return
        sizes = f"{human_size(bytes_done)} of {human_size(bytes_total)}"
        if self._task is None:
            self._task = self._bar.add_task("optimize", total=bins_total, completed=bins_done, sizes=sizes)
        self._bar.update(self._task, completed=bins_done, total=bins_total, sizes=sizes)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
