"""Imported first by the bin processes' fork server (``bin_processes._PRELOAD``): pandas is refused there, and
so in every worker forked from it (``no_pandas``; 0.2-0.3 s of the server's start, which a fresh run waits for)."""

from ..no_pandas import block

block()
