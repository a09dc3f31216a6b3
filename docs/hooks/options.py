"""MkDocs hook: the settings page's table, generated from the one declaration of options.

``dbt_delta_optimize.options.options_table_markdown()`` renders every option (its type, default, Spark
conf key, CLI flag, dbt meta key and help) as a Markdown table; the page's ``<!-- options:table -->``
marker is replaced by it, so the page can never show a stale list.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- options:table -->"


def options_table() -> str:
    from dbt_delta_optimize.options import options_table_markdown

    return options_table_markdown()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, options_table())
    return markdown
