"""MkDocs hook: the settings page's table, generated from the one declaration of options.

``dbt_delta_optimize.options.options_table_markdown()`` renders every option (its type, default, Spark
conf key, CLI flag, dbt meta key and help) as a Markdown table; the page's ``<!-- options:table -->``
marker is replaced by it. Before that module exists (it lands with the operations layer), the table is
built from ``OptimizeOptions``'s fields and says so, so the page never silently shows a stale list.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

MARKER = "<!-- options:table -->"
log = logging.getLogger("mkdocs.hooks.options")


def _fallback() -> str:
    from dbt_delta_optimize.plan.config import OptimizeOptions

    rows = ["| option | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(OptimizeOptions):
        default = f.default if f.default is not dataclasses.MISSING else None
        kind = str(f.type).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{kind}` | `{default}` |")
    note = (
        '!!! note "Generated from `OptimizeOptions`"\n'
        "    `dbt_delta_optimize.options` (the one declaration of every option, with its CLI flag, conf key and\n"
        "    help) is not in this build; this table lists `OptimizeOptions`'s fields only.\n"
    )
    return note + "\n" + "\n".join(rows) + "\n"


def options_table() -> str:
    try:
        from dbt_delta_optimize.options import options_table_markdown  # type: ignore[import-not-found]
    except ImportError:
        log.info("dbt_delta_optimize.options is missing: the settings table is built from OptimizeOptions")
        return _fallback()
    table: str = options_table_markdown()
    return table


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, options_table())
    return markdown
