"""`tfm inspect-attn --html FILE`: one self-contained HTML page that explores every attention head.

The page is the template `attention.html` (shipped as package data) with the command's report embedded as JSON
in a `<script type="application/json">` element; plain JavaScript in the same file draws the heatmap. Nothing is
fetched: no server, no network, no external scripts or fonts, so the file can be mailed or opened offline.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from importlib import resources
from pathlib import Path
from typing import Any

TEMPLATE = "attention.html"

# Inside <script> only "</script" (any case), "<!--" and "<script" can end or confuse the element; escaping
# every "<", ">" and "&" as a JSON \u escape rules all of them out and JSON.parse gives the text back unchanged.
# U+2028/U+2029 are escaped too, for old JavaScript parsers.
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


def _isolate(text: str) -> str:
    """`text` between the Unicode first-strong isolate marks when it holds a right-to-left letter: an Arabic
    source then reads in its own direction in the title and does not reorder the arrow and the target."""
    if any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in text):
        return f"\u2068{text}\u2069"
    return text


def embed_json(data: Any) -> str:
    """`data` as JSON that is safe as the text of a `<script>` element (and still valid JSON)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, escape in _JSON_ESCAPES.items():  # str.replace, not a pass per character: a long sentence's page is 100 MB
        text = text.replace(ch, escape)
    return text


def render_html(report: dict[str, Any]) -> str:
    """The page for `report` (the dict that `tfm inspect-attn --json` prints) as a string."""
    template = resources.files(__package__).joinpath(TEMPLATE).read_text(encoding="utf-8")
    values = {
        "TITLE": html.escape(f"Attention: {_isolate(report['source'])} → {_isolate(report['target'])}"),
        "REPORT_JSON": embed_json(report),  # the weights as --json has them, rounded once
    }
    # One pass over the template only: text that is substituted in is never scanned for placeholders again.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def write_html(report: dict[str, Any], path: Path, option: str = "--html") -> Path:
    """Write the page for `report` to `path`, whole or not at all (parent folders created); returns `path`.

    Raises:
        TfmError: it could not be written (`option` names where the path came from).
    """
    from tfm_cli.cli.common import write_output
    from tfm_cli.files import TEXT_ERRORS

    page = render_html(report)  # (the model's path may hold bytes the locale could not read: TEXT_ERRORS)
    return write_output(Path(path), option, lambda tmp: Path(tmp).write_text(page, encoding="utf-8", errors=TEXT_ERRORS))
