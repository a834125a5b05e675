"""Reading the orchestrator's pages as a user reads them: a table's rows as cell texts.
Shared by the pages' unit tests and the end-to-end tests that read the same pages."""

from __future__ import annotations

import re


def table_rows(html: str, css: str) -> list[list[str]]:
    """The body rows of the page's table of class ``css``, each as its cells' text (tags
    stripped). Fails if the page has no such table."""
    table = re.search(rf'<table class="{css}">(.*?)</table>', html, flags=re.S)
    assert table, f"no table of class {css!r} on the page"
    return [[re.sub(r"<[^>]+>", "", c).strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), flags=re.S)
            if "<td" in row]
