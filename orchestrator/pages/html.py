"""HTML documents around the page models (pure): layout, navigation, filter form, login.

No script and no external resource: one inline style sheet, inline SVG charts, plain
GET forms for the filters. The pages therefore work offline, in a text browser, and
under a Content-Security-Policy that allows no script at all (see :mod:`.routes`).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.pages.data import Choices, Filters
from orchestrator.pages.svg import esc
from orchestrator.pages.views import CORE_PAGES, NavEntry, Page, Table

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#111;background:#fff}
header{background:#1f3b57;color:#fff;padding:.5rem 1rem;display:flex;gap:1.5rem;
align-items:center;flex-wrap:wrap}
header a{color:#fff}header a[aria-current=page]{font-weight:bold;text-decoration:none}
header nav ul{list-style:none;display:flex;gap:1rem;margin:0;padding:0}
header form{margin-left:auto}
main{padding:0 1rem 2rem;max-width:1400px}
form.filters{display:flex;gap:1rem;align-items:end;flex-wrap:wrap;margin:1rem 0;
padding:.5rem;background:#f3f5f8;border:1px solid #ccd}
form.filters label{display:flex;flex-direction:column;font-size:.85rem}
.empty{font-size:1.2rem;padding:1rem;border:1px dashed #889;background:#fafafa}
.note{color:#5a4500;background:#fff6d6;padding:.3rem .6rem;border-left:4px solid #e6a700}
.error{color:#7a0000;background:#ffe8e8;padding:.5rem;border-left:4px solid #c00}
.charts{display:flex;flex-wrap:wrap;gap:1rem}
svg.chart{max-width:100%;height:auto;background:#fff;border:1px solid #e3e3e3}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ccd;padding:.2rem .5rem;text-align:left}
caption{text-align:left;font-weight:bold;padding:.3rem 0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
"""


def document(*, title: str, body: str, current: str | None = None,
             signed_in: bool = True, nav: Sequence[NavEntry] = CORE_PAGES) -> str:
    """The page around ``body``; ``nav`` the navigation's pages (the routes pass the
    core's and the installed studies', :func:`orchestrator.pages.contrib.navigation`)."""
    links = "".join(
        f'<li><a href="/pages/{e.slug}"{" aria-current=page" if e.slug == current else ""}>'
        f"{esc(e.title)}</a></li>" for e in nav)
    logout = ('<form method="post" action="/pages/logout"><button type="submit">'
              "Sign out</button></form>") if signed_in else ""
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · MBB testbed'
        '</title><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{STYLE}</style></head><body>"
        f'<header><a href="/"><strong>MBB testbed</strong></a>'
        f'<nav aria-label="Dashboards"><ul>{links}</ul></nav>{logout}</header>'
        f"<main>{body}</main></body></html>\n"
    )


def _select(name: str, label: str, chosen: str | None,
            options: Sequence[tuple[str, str]]) -> str:
    values = {v for v, _ in options}
    if chosen and chosen not in values:  # keep a typed-in value visible
        options = [*options, (chosen, chosen)]
    opts = [f'<option value=""{"" if chosen else " selected"}>all</option>']
    opts += [f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(t)}</option>'
             for v, t in options]
    return f'<label>{esc(label)}<select name="{name}">{"".join(opts)}</select></label>'


def filter_form(page: str, filters: Filters, choices: Choices) -> str:
    days = "" if filters.days is None else str(filters.days)
    return (
        f'<form class="filters" method="get" action="/pages/{esc(page)}" '
        'aria-label="Filters">'
        + _select("campaign", "Campaign", filters.campaign,
                  [(c, c) for c in choices.campaigns])
        + _select("operator", "Operator", filters.operator,
                  [(c.value, c.label) for c in choices.operators])
        + _select("node", "Node", filters.node, [(n, n) for n in choices.nodes])
        + f'<label>Last days (empty: whole campaign)<input type="number" name="days" min="1" '
          f'max="400" value="{esc(days)}"></label>'
        + '<button type="submit">Show</button></form>'
    )


def _table(t: Table) -> str:
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in t.headers)
    body = "".join(
        "<tr>" + "".join(
            f'<td{" class=num" if _numeric(c) else ""}>{esc(c)}</td>' for c in row) + "</tr>"
        for row in t.rows)
    cls = f' class="{esc(t.css_class)}"' if t.css_class else ""
    return (f"<table{cls}><caption>{esc(t.caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _numeric(text: str) -> bool:
    return bool(text) and text.replace(".", "", 1).replace("-", "", 1).isdigit()


def page_html(page: Page, *, filters: Filters, choices: Choices,
              nav: Sequence[NavEntry] = CORE_PAGES) -> str:
    parts = [f"<h1>{esc(page.title)}</h1>", f"<p>{esc(page.intro)}</p>"]
    if page.slug and page.filterable:
        parts.append(filter_form(page.slug, filters, choices))
        parts.append(f'<p class="selection">Showing {esc(filters.describe())}.</p>')
    parts += [f'<p class="note" role="note">{esc(n)}</p>' for n in page.notes]
    if page.empty:
        parts.append(f'<p class="empty" role="status">{esc(page.empty)}</p>')
    query = filters.query_string()
    for s in page.sections:
        parts.append(f'<section><h2>{esc(s.heading)}</h2>')
        if s.text:
            parts.append(f"<p>{esc(s.text)}</p>")
        if s.links:
            items = "".join(
                f'<li><a href="{esc(link.href + ("?" + query if query else ""))}">'
                f"{esc(link.text)}</a>{': ' + esc(link.note) if link.note else ''}</li>"
                for link in s.links)
            parts.append(f"<ul>{items}</ul>")
        if s.charts:
            parts.append('<div class="charts">' + "".join(s.charts) + "</div>")
        parts += [_table(t) for t in s.tables]
        parts += [f'<form class="action" method="post" action="{esc(a.path)}">'
                  f'<button type="submit">{esc(a.label)}</button></form>' for a in s.actions]
        parts.append("</section>")
    return document(title=page.title, body="".join(parts), current=page.slug or None,
                    nav=nav)


def login_html(*, next_url: str, error: str | None = None,
               nav: Sequence[NavEntry] = CORE_PAGES) -> str:
    err = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    body = (
        "<h1>Sign in</h1>"
        "<p>The dashboards are read-only views of the measurements. Sign in once with your "
        "testbed API token (the one the CLI uses); the browser keeps it in a cookie that "
        "scripts on other sites cannot read.</p>"
        f"{err}"
        '<form method="post" action="/pages/login">'
        f'<input type="hidden" name="next" value="{esc(next_url)}">'
        '<label>API token <input type="password" name="token" autocomplete="current-password" '
        'required size="40"></label> <button type="submit">Sign in</button></form>'
    )
    return document(title="Sign in", body=body, signed_in=False, nav=nav)


def error_html(*, title: str, message: str, nav: Sequence[NavEntry] = CORE_PAGES) -> str:
    return document(title=title, nav=nav,
                    body=f'<h1>{esc(title)}</h1><p class="error" role="alert">{esc(message)}</p>')
