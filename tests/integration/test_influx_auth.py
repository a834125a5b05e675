"""InfluxDB with authentication on, as every deployment runs it (deploy/influxdb), and
the orchestrator's two users against a real influxd (docs/security.md): nothing is
answered without a credential; the reader queries and can neither write nor drop; the
writer writes (ingest, rebuilds) and cannot read; a refused or missing credential is an
error that names the settings to change; the pages read as the reader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.errors import Invalid
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from orchestrator.settings import InfluxCredential
from orchestrator.timeseries.influx import (
    Credential,
    InfluxClient,
    TimeSeriesRejected,
)
from orchestrator.timeseries.lineprotocol import Point
from tests.integration import influxd
from tests.integration.conftest import Api, upload_tat_run
from tests.integration.test_ingest import BINS

pytestmark = pytest.mark.requires(influxd.available())

T0 = 1_795_312_800 * 10**9  # 2026-11-22 00:00 UTC
DB = "auth_test"


@pytest.fixture(scope="module")
def server() -> Iterator[influxd.Influxd]:
    with influxd.running() as s:
        yield s


@pytest.fixture(scope="module")
def users(server: influxd.Influxd) -> tuple[Credential, Credential]:
    """The database's writer and reader, and one point in it."""
    writer, reader = server.provision(DB)
    with InfluxClient(server.url, DB, writer=writer) as c:
        c.write([Point("m", {"v": 1.0}, T0, {"run": "r1"})])
    return writer, reader


def only(server: influxd.Influxd, cred: Credential | None) -> InfluxClient:
    """A client that sends ``cred`` for everything (or nothing), tried once."""
    return InfluxClient(server.url, DB, writer=cred, reader=cred, retries=0)


def count(server: influxd.Influxd) -> int:
    with only(server, server.admin) as c:
        series = c.query("SELECT count(v) FROM m")
    return int(series[0].values[0][1]) if series else 0


def test_nothing_is_answered_without_a_credential(
        server: influxd.Influxd, users: tuple[Credential, Credential]) -> None:
    with only(server, None) as anonymous:
        with pytest.raises(TimeSeriesRejected, match="asks for credentials") as query:
            anonymous.query("SHOW DATABASES")
        assert "TESTBED_INFLUX__READER__USERNAME" in str(query.value)
        with pytest.raises(TimeSeriesRejected, match="asks for credentials") as write:
            anonymous.write([Point("m", {"v": 2.0}, T0 + 1)])
        assert "TESTBED_INFLUX__WRITER__USERNAME" in str(write.value)
        assert isinstance(write.value, Invalid)  # not retried: the same request fails alike
    assert count(server) == 1


def test_the_reader_queries_and_can_neither_write_nor_drop(
        server: influxd.Influxd, users: tuple[Credential, Credential]) -> None:
    _, reader = users
    with only(server, reader) as c:
        [series] = c.query("SELECT v FROM m")
        assert series.rows()[0]["v"] == 1.0
        with pytest.raises(TimeSeriesRejected, match="grant it WRITE") as refused:
            c.write([Point("m", {"v": 2.0}, T0 + 1)])
        assert repr(reader.username) in str(refused.value)
        with pytest.raises(TimeSeriesRejected, match="requires WRITE"):
            c.drop_run_series()
        # What the pages send goes through query(): even a DROP there is the reader's.
        for statement in ("DROP SERIES FROM m", f'DROP DATABASE "{DB}"',
                          "DROP MEASUREMENT m", 'CREATE USER "x" WITH PASSWORD \'y\''):
            with pytest.raises(TimeSeriesRejected, match="not authorized") as refused:
                c.query(statement)
            assert "READ on 'auth_test' only, by design" in str(refused.value)
    assert count(server) == 1


def test_the_writer_writes_and_drops_runs_series_but_cannot_read(
        server: influxd.Influxd, users: tuple[Credential, Credential]) -> None:
    writer, _ = users
    with only(server, writer) as c:
        c.create_database()  # it exists: the writer sees it and leaves it be
        assert c.write([Point("m", {"v": 2.0}, T0 + 1, {"run": "r2"})]) == 1
        assert count(server) == 2
        with pytest.raises(TimeSeriesRejected, match="grant it READ"):
            c.query("SELECT v FROM m")
        c.drop_run_series()  # what `testbed timeseries rebuild --clean` does
    assert count(server) == 0
    # A database the writer may not create: said, with what to do.
    with InfluxClient(server.url, "not_made", writer=writer, retries=0) as other, \
            pytest.raises(TimeSeriesRejected, match="create it as the store's administrator"):
        other.create_database()


def test_a_wrong_password_says_which_user_and_what_to_set(
        server: influxd.Influxd, users: tuple[Credential, Credential]) -> None:
    writer, reader = users
    wrong = InfluxClient(server.url, DB, writer=Credential(writer.username, "nope"),
                         reader=Credential(reader.username, "nope"), retries=0)
    with wrong:
        with pytest.raises(TimeSeriesRejected) as refused:
            wrong.write([Point("m", {"v": 3.0}, T0 + 2)])
        assert f"the writer {writer.username!r}" in str(refused.value)
        assert "TESTBED_INFLUX__WRITER__PASSWORD" in str(refused.value)
        with pytest.raises(TimeSeriesRejected) as refused:
            wrong.query("SELECT v FROM m")
        assert f"the reader {reader.username!r}" in str(refused.value)
        assert "TESTBED_INFLUX__READER__PASSWORD" in str(refused.value)


def test_ingest_writes_as_the_writer_and_the_pages_read_as_the_reader(
        api_influx: Api, tmp_path: Path) -> None:
    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert isinstance(ctx.timeseries, InfluxClient)
    assert ctx.timeseries.writer and ctx.timeseries.reader
    assert ctx.timeseries.writer.username != ctx.timeseries.reader.username
    ctx.timeseries.create_database()
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = upload_tat_run(api, token, tmp_path)
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 1
    [series] = ctx.timeseries.query(f"SELECT count(bps) FROM tat WHERE run = '{run_id}'")
    assert series.values[0][1] == BINS
    page = api.client.get("/pages/hourly", headers=api.admin)
    assert page.status_code == 200, page.text
    assert "se-01" in page.text


def test_pages_with_a_refused_reader_say_what_to_set_while_ingest_writes(
        tmp_path: Path, api_influx: Api, store: influxd.Influxd) -> None:
    """The two users are apart: a wrong reader's password stops the pages, with the
    setting to change, and nothing else."""
    base = api_influx.settings
    settings = base.model_copy(update={"influx": base.influx.model_copy(update={
        "reader": InfluxCredential(username=base.influx.reader.username, password="nope")})})
    app = create_app(settings, clock=api_influx.clock, reaper=False)
    with TestClient(app) as client:
        ctx: Context = app.state.ctx
        assert isinstance(ctx.timeseries, InfluxClient)
        ctx.timeseries.create_database()  # the writer's: unaffected
        page = client.get("/pages/hourly", headers=api_influx.admin)
        assert page.status_code == 503
        assert "TESTBED_INFLUX__READER__PASSWORD" in page.text
        assert ctx.timeseries.write([Point("m", {"v": 1.0}, T0)]) == 1
    app.state.ctx.db.engine.dispose()
