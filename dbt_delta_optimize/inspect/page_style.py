"""What the health pages share at the bottom: their colours (one meaning each) and their escaping of text."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["BLUE", "GREEN", "GREY", "RED", "esc"]

#: red: to act on; green: healthy or better; blue: this version's or run's numbers; grey: before, predicted, axes
RED, GREEN, BLUE, GREY = "#b3261e", "#2a7a2a", "#3b6ea8", "#8a949e"


def esc(s: Any) -> str:
    """Text (untrusted: table paths, partition values) escaped for HTML and SVG, quotes included."""
    return html.escape(str(s), quote=True)
