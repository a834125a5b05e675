"""The dashboard pages over HTTP: ``/`` (index), the time-series pages (every installed
study's, :func:`study_router`),
``/pages/{campaigns,fleet}``, ``/pages/login`` and ``/pages/logout``.

What the routes need from the app (set by the app factory):

- ``app.state.ctx``: the services' :class:`~orchestrator.services.context.Context`
  (tokens are checked against the user store, node time zones read from the registry);
- a :class:`~.queries.TimeSeriesQuery` to read from: ``ctx.timeseries`` (the
  :class:`~orchestrator.timeseries.influx.InfluxClient` built from ``settings.influx``)
  unless ``app.state.timeseries`` overrides it (e.g. a read-only user or a replica).
  Without either, every page answers 503 and says the store is not configured.

Who may read: anyone with a testbed API token (the same tokens as the REST API), each
seeing only what the API shows them (services.access: their projects' campaigns and
runs; the shared fleet). A browser signs in once at ``/pages/login``: that opens a
server-side session (services.sessions) whose random secret, not the token, is kept in
an HttpOnly, SameSite=Strict cookie (not readable by scripts, not sent by other sites'
requests) and checked on every request; signing out revokes the session, and revoking
the token ends its sessions at once. Scripts may send ``Authorization: Bearer``;
``?token=`` on any page signs in and redirects to the same page without it (for kiosk
screens and headless browsers; it lands in access logs, so prefer the form).

The pages read, with one exception: the campaigns page has Cancel and Delete buttons
(plain POST forms, ``/pages/campaigns/{id}/cancel`` and ``.../delete``) for the
campaign's owner and administrators, the same service calls and checks as the API.
A forged cross-site POST carries no cookie (SameSite=Strict), and a POST whose
``Origin`` or ``Sec-Fetch-Site`` names another site is refused (403) besides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.errors import Conflict, Forbidden, NotFound, TestbedError, Unauthorized
from orchestrator.model.fleet import BadFleetFilter, parse_query
from orchestrator.pages import campaigns, fleet, html, queries, views
from orchestrator.pages.contrib import (
    PageBuilder,
    StudyPage,
    installed_choice_sources,
    navigation,
)
from orchestrator.pages.data import MAX_DAYS, Choices, Filters
from orchestrator.pages.forms import BadForm, read_form
from orchestrator.services.access import readable
from orchestrator.services.auth import Principal, authenticate_user, bearer_token
from orchestrator.services.campaigns import cancel_campaign, delete_campaign, list_campaigns
from orchestrator.services.context import Context
from orchestrator.services.fleetview import fleet_view
from orchestrator.services.nodes import list_nodes
from orchestrator.services.sessions import (
    SESSION_S,
    authenticate_session,
    close_session,
    open_session,
)
from orchestrator.timeseries.influx import TimeSeriesError

router = APIRouter(include_in_schema=False, tags=["pages"])

COOKIE = "testbed_pages"
#: No script, no outside resource; inline styles and SVG only (module docstring of html).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

#: A query parameter of a page: at most 200 characters and no control character (a NUL
#: in the fleet page's node filter reached PostgreSQL, which refuses NUL in text: a 500).
Text = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")]
#: The sign-in form's fields and the most characters of each (a token is at most 512
#: printable characters: services.auth.well_formed).
LOGIN_FIELDS = {"token": 512, "next": 2048}


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


def _caller(request: Request) -> Principal | None:
    """Who is reading: the bearer token's holder, else the session's; None if neither."""
    token = bearer_token(request.headers.get("authorization"))
    try:
        if token is not None:
            return authenticate_user(_ctx(request), token)
        return authenticate_session(_ctx(request), request.cookies.get(COOKIE))
    except Unauthorized:
        return None


def _sign_in(request: Request, token: str, target: str) -> Response | None:
    """The redirect to ``target`` that carries a new session's cookie; None when the
    token is not accepted."""
    try:
        secret, _ = open_session(_ctx(request), token)
    except Unauthorized:
        return None
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, secret, max_age=SESSION_S, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")
    return response


def _safe_next(url: str | None) -> str:
    """Only a path on this site (no ``//host`` or scheme): no open redirect."""
    if not url or not url.startswith("/") or url.startswith("//") or "\\" in url:
        return "/"
    return url


def _guard(request: Request) -> Principal | Response:
    """Who may read; else the response that signs them in."""
    query = request.query_params
    given = query.get("token")
    if given is not None:
        rest = urlencode([(k, v) for k, v in query.multi_items() if k != "token"])
        target = request.url.path + (f"?{rest}" if rest else "")
        signed_in = _sign_in(request, given, target)
        if signed_in is not None:
            return signed_in
        return _html(html.login_html(nav=navigation(), next_url=target,
                                     error="That token was not accepted."),
                     401)
    principal = _caller(request)
    if principal is not None:
        return principal
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


def _page(request: Request, build: PageBuilder, *, campaign: str | None,
          operator: str | None, node: str | None, days: str | None) -> Response:
    principal = _guard(request)
    if isinstance(principal, Response):
        return principal
    try:
        filters = _filters(campaign, operator, node, days)
    except BadFilter as e:
        return _html(html.error_html(nav=navigation(), title="Bad filter", message=str(e)), 400)
    ts = _store(request)
    if ts is None:
        return _html(html.error_html(
            nav=navigation(), title="No time-series store",
            message="The orchestrator has no InfluxDB configured, so there is nothing to "
                    "show. Set TESTBED_INFLUX__URL (and __DATABASE) and restart it."), 503)
    zones = views.Zones({n.id: n.timezone for n in list_nodes(_ctx(request))})
    mine = readable(_ctx(request), principal)
    try:
        page = build(ts, filters, zones, mine)
        choices = queries.choices(ts, filters, readable=mine,
                                  sources=installed_choice_sources())
    except TimeSeriesError as e:
        return _html(html.error_html(nav=navigation(), title="Time series unavailable",
                                     message=str(e)), 503)
    return _html(html.page_html(page, filters=filters, choices=choices, nav=navigation()))


@router.get("/", response_class=HTMLResponse)
@router.get("/pages", response_class=HTMLResponse)
@router.get("/pages/", response_class=HTMLResponse)
def index(request: Request) -> Response:
    if isinstance(principal := _guard(request), Response):
        return principal
    return _html(html.page_html(views.index_page(navigation()), filters=Filters(),
                                choices=Choices(), nav=navigation()))


def _study_route(build: PageBuilder) -> Callable[..., Response]:
    """A GET route for one study page: the four filters, each at most 200 characters."""
    def route(request: Request, campaign: Text = None, operator: Text = None,
              node: Text = None, days: Text = None) -> Response:
        return _page(request, build, campaign=campaign, operator=operator, node=node,
                     days=days)
    return route


def study_router(pages: Sequence[StudyPage]) -> APIRouter:
    """The installed studies' pages (:mod:`.contrib`), with the core's sign-in, filters
    and access rules; the app factory includes it after :data:`router`."""
    out = APIRouter(include_in_schema=False, tags=["pages"])
    for page in pages:
        out.add_api_route(f"/pages/{page.slug}", _study_route(page.build), methods=["GET"],
                          response_class=HTMLResponse)
    return out


@router.get("/pages/campaigns", response_class=HTMLResponse)
def campaigns_list(request: Request) -> Response:
    """Campaigns and the planner's decisions: from the state database, not the store."""
    if isinstance(principal := _guard(request), Response):
        return principal
    page = campaigns.campaigns_page(list_campaigns(_ctx(request), principal),
                                    viewer=principal.name, admin=principal.is_admin)
    return _html(html.page_html(page, filters=Filters(), choices=Choices(), nav=navigation()))


def _same_site(request: Request) -> bool:
    """False for a POST a browser says came from another site (Origin, Sec-Fetch-Site);
    clients that send neither (scripts, the CLI) are judged by their token alone."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return False
    return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


#: How the campaign actions' errors show on a page (the API maps the same errors).
_ACTION_STATUS: dict[type[TestbedError], int] = {NotFound: 404, Forbidden: 403, Conflict: 409}


def _campaign_action(request: Request, act: Callable[[Principal], object]) -> Response:
    me = _caller(request)
    if me is None:
        return RedirectResponse("/pages/login?next=/pages/campaigns", status_code=303)
    if not _same_site(request):
        return _html(html.error_html(nav=navigation(), title="Refused",
                                     message="This form was sent from "
                                     "another site; use the campaigns page itself."), 403)
    try:
        act(me)
    except (NotFound, Forbidden, Conflict) as e:
        status = next(code for cls, code in _ACTION_STATUS.items() if isinstance(e, cls))
        return _html(html.error_html(nav=navigation(), title="Not done", message=str(e)), status)
    return RedirectResponse("/pages/campaigns", status_code=303)


@router.post("/pages/campaigns/{campaign_id}/cancel")
def campaign_cancel(request: Request, campaign_id: str) -> Response:
    return _campaign_action(request, lambda me: cancel_campaign(_ctx(request), me, campaign_id))


@router.post("/pages/campaigns/{campaign_id}/delete")
def campaign_delete(request: Request, campaign_id: str) -> Response:
    return _campaign_action(request, lambda me: delete_campaign(_ctx(request), me, campaign_id))


@router.get("/pages/fleet", response_class=HTMLResponse)
def fleet_health(request: Request, health: Text = None, node: Text = None,
                 sims: Text = None, page: Text = None) -> Response:
    """Nodes' health and SIMs' data plans: from the state database, not the store. The
    fleet is shared infrastructure: every signed-in user sees all of it. The whole
    fleet counted, then a page of nodes (filters: ``health``, ``node``, ``sims``)."""
    if isinstance(principal := _guard(request), Response):
        return principal
    try:
        query = parse_query(health=health, node=node, sims=sims, page=page)
    except BadFleetFilter as e:
        return _html(html.error_html(nav=navigation(), title="Bad filter", message=str(e)), 400)
    ctx = _ctx(request)
    built = fleet.fleet_page(fleet_view(ctx, query), now=ctx.clock.now())
    return _html(html.page_html(built, filters=Filters(), choices=Choices(),
                                 nav=navigation()))


@router.get("/pages/login", response_class=HTMLResponse)
def login_form(next: Text = None) -> Response:
    return _html(html.login_html(nav=navigation(), next_url=_safe_next(next)))


@router.post("/pages/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    # A urlencoded form parsed by hand: FastAPI's Form() would need python-multipart.
    try:
        form = read_form(await request.body(), request.headers.get("content-type"),
                         LOGIN_FIELDS)
    except BadForm as e:
        return _html(html.login_html(nav=navigation(), next_url="/",
                                     error=f"The form was not read: {e}."), 400)
    target = _safe_next(form.get("next"))
    if "token" not in form:
        return _html(html.login_html(nav=navigation(), next_url=target,
                                     error="The form was not read: it has no 'token' "
                                           "field."), 400)
    token = form["token"].strip()
    if not token:
        return _html(html.login_html(nav=navigation(), next_url=target,
                                     error="Enter your API token."), 401)
    signed_in = await run_in_threadpool(_sign_in, request, token, target)
    if signed_in is None:
        return _html(html.login_html(nav=navigation(), next_url=target,
                                     error="That token was not accepted: check it, or ask "
                                           "an administrator for one."), 401)
    return signed_in


@router.post("/pages/logout")
def logout(request: Request) -> Response:
    """Ends the session on the server (the cookie is dead even where it was copied),
    then clears the cookie."""
    close_session(_ctx(request), request.cookies.get(COOKIE))
    response = RedirectResponse("/pages/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
