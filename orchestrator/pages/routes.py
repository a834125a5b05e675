"""The dashboard pages over HTTP: ``/`` (index), ``/pages/{hourly,daily,abw-tat,
time-of-day,campaigns,fleet}``, ``/pages/login`` and ``/pages/logout``.

What the routes need from the app (set by the app factory):

- ``app.state.ctx``: the services' :class:`~orchestrator.services.context.Context`
  (tokens are checked against the user store, node time zones read from the registry);
- a :class:`~.queries.TimeSeriesQuery` to read from: ``ctx.timeseries`` (the
  :class:`~orchestrator.timeseries.influx.InfluxClient` built from ``settings.influx``)
  unless ``app.state.timeseries`` overrides it (e.g. a read-only user or a replica).
  Without either, every page answers 503 and says the store is not configured.

Who may read: anyone with a testbed API token (the same tokens as the REST API). A
browser signs in once at ``/pages/login``; the token is then kept in an HttpOnly,
SameSite=Strict cookie (not readable by scripts, not sent by other sites' requests) and
checked on every request, so a revoked token stops working at once. Scripts may send
``Authorization: Bearer``; ``?token=`` on any page signs in and redirects to the same
page without it (for kiosk screens and headless browsers; it lands in access logs, so
prefer the form). The pages only read, so there is nothing for a forged request to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.errors import Unauthorized
from orchestrator.pages import campaigns, fleet, html, queries, views
from orchestrator.pages.data import MAX_DAYS, Choices, Filters
from orchestrator.services.auth import authenticate_user, bearer_token
from orchestrator.services.campaigns import list_campaigns
from orchestrator.services.context import Context
from orchestrator.services.nodes import list_nodes
from orchestrator.services.quotas import list_quotas
from orchestrator.timeseries.influx import TimeSeriesError

router = APIRouter(include_in_schema=False, tags=["pages"])

COOKIE = "testbed_pages"
#: How long a sign-in lasts in the browser, seconds: a working day.
COOKIE_MAX_AGE_S = 12 * 3600
#: No script, no outside resource; inline styles and SVG only (module docstring of html).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Text = Annotated[str | None, Query(max_length=200)]


class BadFilter(ValueError):
    pass


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=SECURITY_HEADERS)


def _ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def _store(request: Request) -> queries.TimeSeriesQuery | None:
    for candidate in (getattr(request.app.state, "timeseries", None),
                      _ctx(request).timeseries):
        if isinstance(candidate, queries.TimeSeriesQuery):
            return candidate
    return None


def _token(request: Request) -> str | None:
    return bearer_token(request.headers.get("authorization")) or request.cookies.get(COOKIE)


def _valid(request: Request, token: str | None) -> bool:
    try:
        authenticate_user(_ctx(request), token)
    except Unauthorized:
        return False
    return True


def _safe_next(url: str | None) -> str:
    """Only a path on this site (no ``//host`` or scheme): no open redirect."""
    if not url or not url.startswith("/") or url.startswith("//") or "\\" in url:
        return "/"
    return url


def _signed_in(response: Response, request: Request, token: str) -> Response:
    response.set_cookie(COOKIE, token, max_age=COOKIE_MAX_AGE_S, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")
    return response


def _guard(request: Request) -> Response | None:
    """None when the caller may read; else the redirect that signs them in."""
    query = request.query_params
    given = query.get("token")
    if given is not None:
        rest = urlencode([(k, v) for k, v in query.multi_items() if k != "token"])
        target = request.url.path + (f"?{rest}" if rest else "")
        if _valid(request, given):
            return _signed_in(RedirectResponse(target, status_code=303), request, given)
        return _html(html.login_html(next_url=target, error="That token was not accepted."),
                     401)
    if _valid(request, _token(request)):
        return None
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/pages/login?{urlencode({'next': here})}", status_code=303)


def _filters(campaign: str | None, operator: str | None, node: str | None,
             days: str | None) -> Filters:
    n: int | None = None
    if days and days.strip():
        try:
            n = int(days)
        except ValueError as e:
            raise BadFilter(f"days must be a whole number of days, not {days!r}") from e
        if not 1 <= n <= MAX_DAYS:
            raise BadFilter(f"days must be between 1 and {MAX_DAYS}")
    return Filters(campaign=campaign or None, operator=operator or None, node=node or None,
                   days=n)


PageBuilder = Callable[[queries.TimeSeriesQuery, Filters, views.Zones], views.Page]


def _page(request: Request, build: PageBuilder, *, campaign: str | None,
          operator: str | None, node: str | None, days: str | None) -> Response:
    if (redirect := _guard(request)) is not None:
        return redirect
    try:
        filters = _filters(campaign, operator, node, days)
    except BadFilter as e:
        return _html(html.error_html(title="Bad filter", message=str(e)), 400)
    ts = _store(request)
    if ts is None:
        return _html(html.error_html(
            title="No time-series store",
            message="The orchestrator has no InfluxDB configured, so there is nothing to "
                    "show. Set TESTBED_INFLUX__URL (and __DATABASE) and restart it."), 503)
    zones = views.Zones({n.id: n.timezone for n in list_nodes(_ctx(request))})
    try:
        page = build(ts, filters, zones)
        choices = queries.choices(ts, filters)
    except TimeSeriesError as e:
        return _html(html.error_html(title="Time series unavailable", message=str(e)), 503)
    return _html(html.page_html(page, filters=filters, choices=choices))


@router.get("/", response_class=HTMLResponse)
@router.get("/pages", response_class=HTMLResponse)
@router.get("/pages/", response_class=HTMLResponse)
def index(request: Request) -> Response:
    if (redirect := _guard(request)) is not None:
        return redirect
    return _html(html.page_html(views.index_page(), filters=Filters(),
                                choices=Choices()))


@router.get("/pages/hourly", response_class=HTMLResponse)
def hourly(request: Request, campaign: Text = None, operator: Text = None,
           node: Text = None, days: Text = None) -> Response:
    return _page(request, lambda ts, f, z: views.hourly_page(
        queries.tat_summaries(ts, f), zones=z, filters=f),
        campaign=campaign, operator=operator, node=node, days=days)


@router.get("/pages/daily", response_class=HTMLResponse)
def daily(request: Request, campaign: Text = None, operator: Text = None,
          node: Text = None, days: Text = None) -> Response:
    return _page(request, lambda ts, f, z: views.daily_page(
        queries.tat_summaries(ts, f), zones=z, filters=f),
        campaign=campaign, operator=operator, node=node, days=days)


@router.get("/pages/abw-tat", response_class=HTMLResponse)
def abw_tat(request: Request, campaign: Text = None, operator: Text = None,
            node: Text = None, days: Text = None) -> Response:
    return _page(request, lambda ts, f, _z: views.abw_tat_page(
        queries.tat_summaries(ts, f), queries.abw_estimates(ts, f), filters=f),
        campaign=campaign, operator=operator, node=node, days=days)


@router.get("/pages/time-of-day", response_class=HTMLResponse)
def time_of_day(request: Request, campaign: Text = None, operator: Text = None,
                node: Text = None, days: Text = None) -> Response:
    return _page(request, lambda ts, f, z: views.timeofday_page(
        queries.tat_summaries(ts, f), zones=z, filters=f),
        campaign=campaign, operator=operator, node=node, days=days)


@router.get("/pages/campaigns", response_class=HTMLResponse)
def campaigns_list(request: Request) -> Response:
    """Campaigns and the planner's decisions: from the state database, not the store."""
    if (redirect := _guard(request)) is not None:
        return redirect
    page = campaigns.campaigns_page(list_campaigns(_ctx(request)))
    return _html(html.page_html(page, filters=Filters(), choices=Choices()))


@router.get("/pages/fleet", response_class=HTMLResponse)
def fleet_health(request: Request) -> Response:
    """Nodes' health and SIMs' data plans: from the state database, not the store."""
    if (redirect := _guard(request)) is not None:
        return redirect
    ctx = _ctx(request)
    page = fleet.fleet_page(list_nodes(ctx), list_quotas(ctx).sims, now=ctx.clock.now())
    return _html(html.page_html(page, filters=Filters(), choices=Choices()))


@router.get("/pages/login", response_class=HTMLResponse)
def login_form(next: Text = None) -> Response:
    return _html(html.login_html(next_url=_safe_next(next)))


@router.post("/pages/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    # A urlencoded form parsed by hand: FastAPI's Form() would need python-multipart.
    form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=10)
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or ["/"])[0])
    if not await run_in_threadpool(_valid, request, token):
        return _html(html.login_html(next_url=target,
                                     error="That token was not accepted: check it, or ask "
                                           "an administrator for one."), 401)
    return _signed_in(RedirectResponse(target, status_code=303), request, token)


@router.post("/pages/logout")
def logout() -> Response:
    response = RedirectResponse("/pages/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
