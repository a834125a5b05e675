"""InfluxDB client over the v1 HTTP API: ``/write`` line protocol, ``/query`` InfluxQL.

Only the v1 API: Debian's InfluxDB 1.6.7 answers 404 on ``/api/v2/write``, while 2.x
and 3.x still serve ``/write`` and ``/query`` (DESIGN.md, "What this workplace
allows"). Points go in batches of 5000, the batch size InfluxData recommends for 1.x
(https://docs.influxdata.com/influxdb/v1/guides/write_data/ "optimal batch size is
5,000 points"). A batch that fails for a reason that may pass (connection refused,
timeout, 5xx, 429) is retried with exponential backoff; one the server refuses (400:
bad line protocol or a field-type conflict, 401/403, 404: no database) is not.

Two credentials, sent per request (docs/security.md): what writes (``/write``, ``DROP
SERIES``, ``CREATE DATABASE``) goes as the writer, every other query as the reader, so
that a query can only read whatever text it holds. A refused credential is a
:class:`TimeSeriesRejected` that names the user and the settings to change.

Retrying is safe: a point with the same measurement, tag set and timestamp replaces
itself, so a caller that gets :class:`TimeSeriesUnavailable` can simply write the same
points again later (the ingest service keeps the bundle in the archive, so nothing is
lost; ``written`` says how many went in before the failure).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from orchestrator.errors import Invalid, TestbedError
from orchestrator.timeseries.lineprotocol import Point, encode_batch

DEFAULT_BATCH = 5000  # InfluxData's recommended batch for 1.x (module docstring)


class TimeSeriesError(TestbedError):
    """The time-series store failed a request."""


class TimeSeriesUnavailable(TimeSeriesError):
    """The store could not be reached or was overloaded, retries included; try later."""

    def __init__(self, message: str, *, written: int = 0) -> None:
        super().__init__(message)
        self.written = written


class TimeSeriesRejected(TimeSeriesError, Invalid):
    """The store refused the request as sent; retrying the same request will not help."""


#: Which of the two users a request goes as.
Role = Literal["writer", "reader"]
#: What to set when the writer's or the reader's credential is refused or missing: the
#: orchestrator's settings (orchestrator/settings.py, InfluxSettings).
SETTINGS_OF: dict[Role, str] = {
    "writer": "TESTBED_INFLUX__WRITER__USERNAME and TESTBED_INFLUX__WRITER__PASSWORD",
    "reader": "TESTBED_INFLUX__READER__USERNAME and TESTBED_INFLUX__READER__PASSWORD",
}
#: The privilege each role needs on the database.
PRIVILEGE_OF: dict[Role, str] = {"writer": "WRITE", "reader": "READ"}


@dataclass(frozen=True)
class Credential:
    """An InfluxDB user, sent as HTTP basic auth (the v1 API's)."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Series:
    """One series of a query result."""

    name: str
    tags: dict[str, str]
    columns: list[str]
    values: list[list[Any]]

    def rows(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, v, strict=True)) for v in self.values]


class InfluxClient:
    """A :class:`~.lineprotocol.TimeSeriesSink` writing to one InfluxDB database.

    ``timeout_s`` bounds each request; ``retries`` extra attempts per batch are made
    after ``backoff_s``, doubling each time (0.5, 1, 2 s by default: a restarting
    influxd is back within seconds, a longer outage is the caller's to wait out).
    """

    def __init__(
        self,
        url: str,
        database: str,
        *,
        writer: Credential | None = None,
        reader: Credential | None = None,
        timeout_s: float = 10.0,
        batch_size: int = DEFAULT_BATCH,
        retries: int = 3,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        http: httpx.Client | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.url = url.rstrip("/")
        self.database = database
        self.batch_size = batch_size
        self.retries = retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self.writer = writer
        #: Without a reader of its own, queries go as the writer (development, tests).
        self.reader = reader or writer
        self._http = http or httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def without_retries(self) -> InfluxClient:
        """The same store and connection pool, each request tried once: for a reader
        that holds a lock (the planner's proxy-mode decisions) and has a safe answer
        when the store does not reply, rather than seconds of back-off."""
        return InfluxClient(self.url, self.database, writer=self.writer,
                            reader=self.reader, batch_size=self.batch_size,
                            retries=0, sleep=self._sleep, http=self._http)

    def __enter__(self) -> InfluxClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- requests -------------------------------------------------------------------

    def _request(self, method: str, path: str, *, params: dict[str, str],
                 content: bytes | None = None, what: str, role: Role) -> httpx.Response:
        delay = self.backoff_s
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(delay)
                delay *= 2
            try:
                r = self._http.request(method, f"{self.url}{path}", params=params,
                                       content=content, auth=self._auth(role))
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status_code == 429 or r.status_code >= 500:
                last = f"HTTP {r.status_code}: {_error_text(r)}"
                continue
            if r.status_code >= 400:
                raise TimeSeriesRejected(self._rejected(r, what, role))
            return r
        raise TimeSeriesUnavailable(
            f"InfluxDB at {self.url} did not take {what} after {self.retries + 1} attempts "
            f"({last}). Check that influxd is running and reachable; the data is safe in "
            "the archive and can be written again (rebuild the time series from it)."
        )

    def _credential(self, role: Role) -> Credential | None:
        return self.writer if role == "writer" else self.reader

    def _auth(self, role: Role) -> httpx.BasicAuth | None:
        cred = self._credential(role)
        return httpx.BasicAuth(cred.username, cred.password) if cred else None

    def _rejected(self, r: httpx.Response, what: str, role: Role) -> str:
        text = _error_text(r)
        cred = self._credential(role)
        if r.status_code == 401 and cred is None:
            return (f"InfluxDB at {self.url} asks for credentials for {what} ({text}) and "
                    f"the orchestrator has no {role} set: set {SETTINGS_OF[role]} "
                    "(docs/security.md).")
        if r.status_code == 401 and cred is not None:
            return (f"InfluxDB at {self.url} refused the {role} {cred.username!r} for "
                    f"{what} ({text}): a wrong username or password; set {SETTINGS_OF[role]} "
                    "to the store's (docs/security.md says who holds which).")
        needed = re.search(r"requires (READ|WRITE|admin)", text)
        if r.status_code == 403 and needed and needed.group(1) != PRIVILEGE_OF[role]:
            # e.g. a DROP sent as a query: the reader has READ only, by design.
            return (f"InfluxDB at {self.url} refused {what} as the {role}: {text}. The "
                    f"{role} has {PRIVILEGE_OF[role]} on {self.database!r} only, by design "
                    "(docs/security.md).")
        if r.status_code == 403:
            who = f"the {role} {cred.username!r}" if cred else "an anonymous request"
            return (f"InfluxDB at {self.url} does not let {who} make {what} ({text}): "
                    f"grant it {PRIVILEGE_OF[role]} on {self.database!r} (GRANT "
                    f'{PRIVILEGE_OF[role]} ON "{_ident(self.database)}" TO ...), or set '
                    f"{SETTINGS_OF[role]} to a user that has it.")
        if r.status_code == 404 and "database not found" in text:
            return (f"InfluxDB at {self.url} has no database {self.database!r}: create it "
                    "(InfluxClient.create_database, or CREATE DATABASE in the influx shell).")
        if r.status_code == 404:
            return (f"{self.url} answered 404 to {what}: is it an InfluxDB with the v1 API "
                    "(/write, /query)?")
        return f"InfluxDB at {self.url} refused {what}: HTTP {r.status_code}: {text}"

    def ping(self) -> bool:
        """True when the server answers ``/ping``."""
        try:
            return self._http.get(f"{self.url}/ping").status_code == 204
        except httpx.TransportError:
            return False

    def write(self, points: Sequence[Point]) -> int:
        """Store ``points`` in batches; returns how many were written."""
        written = 0
        params = {"db": self.database, "precision": "ns"}
        for first in range(0, len(points), self.batch_size):
            batch = points[first : first + self.batch_size]
            body = encode_batch(batch)
            try:
                self._request("POST", "/write", params=params, content=body,
                              what=f"a batch of {len(batch)} points", role="writer")
            except TimeSeriesUnavailable as e:
                raise TimeSeriesUnavailable(str(e), written=written) from e
            written += len(batch)
        return written

    def query(self, influxql: str, *, epoch: str = "ns") -> list[Series]:
        """Run InfluxQL statements as the reader; the series of all results, times as
        ``epoch`` integers."""
        return self._query(influxql, epoch=epoch, role="reader")

    def _query(self, influxql: str, *, epoch: str = "ns", role: Role) -> list[Series]:
        """POST, because 1.x only takes CREATE/DROP statements that way."""
        r = self._request("POST", "/query",
                          params={"db": self.database, "q": influxql, "epoch": epoch},
                          what="a query" if role == "reader" else f"the query {influxql!r}",
                          role=role)
        out: list[Series] = []
        for result in r.json().get("results", []):
            if "error" in result:
                raise TimeSeriesRejected(f"InfluxQL error in {influxql!r}: {result['error']}")
            for s in result.get("series", []):
                out.append(Series(name=str(s.get("name", "")), tags=dict(s.get("tags") or {}),
                                  columns=list(s["columns"]), values=list(s["values"])))
        return out

    def drop_run_series(self, *, campaign: str | None = None) -> None:
        """Drop every series written from runs' results (all of them, or one
        campaign's): what a clean rebuild rewrites. Live heartbeat samples and quota
        series carry no ``run`` tag and stay. ``DROP SERIES`` removes the series' points
        at every time, so points an older conversion wrote with other tags or at other
        times go too."""
        cond = ('"campaign" = ' + literal(campaign)) if campaign is not None \
            else "\"run\" =~ /./"
        self._query(f"DROP SERIES WHERE {cond}", role="writer")

    def create_database(self, *, retention: str | None = None) -> None:
        """Create the database unless the writer sees it already. ``retention``: e.g.
        ``"400d"``. Only an administrator may create one: with authentication on, the
        store's own start makes it (deploy/influxdb/influxdb-start), and a writer that
        is no administrator is told so when it is missing."""
        shown = self._query("SHOW DATABASES", role="writer")
        if any(row and row[0] == self.database for s in shown for row in s.values):
            return
        q = f'CREATE DATABASE "{_ident(self.database)}"'
        if retention:
            q += f" WITH DURATION {retention}"
        try:
            self._query(q, role="writer")
        except TimeSeriesRejected as e:
            raise TimeSeriesRejected(
                f"InfluxDB at {self.url} has no database {self.database!r} and the writer "
                f"may not create it ({e}): create it as the store's administrator "
                f'(CREATE DATABASE "{_ident(self.database)}"; deploy/influxdb/influxdb-start '
                "does at the store's start) and grant the writer WRITE on it.") from e


def literal(value: str) -> str:
    """An InfluxQL string literal: single-quoted, backslash and quote escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', '\\"')


def _error_text(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()[:300] or r.reason_phrase
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])[:300]
    return str(body)[:300]
