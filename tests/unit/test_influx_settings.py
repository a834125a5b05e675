"""The orchestrator's InfluxDB users (orchestrator/settings.py, InfluxSettings): outside
development a store needs both the writer and the reader, each with a generated
password, and two users apart; every refusal names the variables to set. Read from the
environment as compose and the cluster pass them (TESTBED_INFLUX__WRITER__PASSWORD)."""

from __future__ import annotations

import secrets

import pytest

from orchestrator.settings import InfluxCredential, InfluxSettings, Settings

ADMIN = secrets.token_hex(32)
URL = "http://influxdb:8086"


def user(name: str, password: str | None = None) -> InfluxCredential:
    return InfluxCredential(username=name, password=password or secrets.token_hex(32))


def production(influx: InfluxSettings) -> Settings:
    return Settings(environment="production", admin_token=ADMIN, influx=influx)


def test_both_users_with_generated_passwords_are_accepted() -> None:
    influx = InfluxSettings(url=URL, writer=user("testbed_writer"), reader=user("testbed_reader"))
    assert production(influx).influx.reader.username == "testbed_reader"
    # Without a store, nothing is asked of the users.
    assert production(InfluxSettings()).influx.url is None


@pytest.mark.parametrize(("influx", "expected"), [
    (InfluxSettings(url=URL), ["TESTBED_INFLUX__WRITER__USERNAME",
                               "TESTBED_INFLUX__READER__USERNAME"]),
    (InfluxSettings(url=URL, writer=user("w")), ["TESTBED_INFLUX__READER__USERNAME"]),
    (InfluxSettings(url=URL, writer=user("w", "change-me"), reader=user("r")),
     ["writer's password is a placeholder", "openssl rand -hex 32"]),
    (InfluxSettings(url=URL, writer=user("w"), reader=user("r", "short")),
     ["reader's password is 5 characters long"]),
    (InfluxSettings(url=URL, writer=user("same"), reader=user("same")),
     ["the same user", "READ only"]),
])
def test_an_unfit_store_user_is_refused_outside_development(
        influx: InfluxSettings, expected: list[str]) -> None:
    with pytest.raises(ValueError) as refused:
        production(influx)
    for text in expected:
        assert text in str(refused.value)
    # Development takes any (a local influxd without authentication).
    Settings(environment="development", admin_token=ADMIN, influx=influx)


def test_users_come_from_the_environment_and_empty_is_unset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = secrets.token_hex(32), secrets.token_hex(32)
    for name, value in {"TESTBED_ENVIRONMENT": "production", "TESTBED_ADMIN_TOKEN": ADMIN,
                        "TESTBED_INFLUX__URL": URL,
                        "TESTBED_INFLUX__WRITER__USERNAME": "testbed_writer",
                        "TESTBED_INFLUX__WRITER__PASSWORD": writer,
                        "TESTBED_INFLUX__READER__USERNAME": "testbed_reader",
                        "TESTBED_INFLUX__READER__PASSWORD": reader}.items():
        monkeypatch.setenv(name, value)
    influx = Settings().influx
    assert (influx.writer.password, influx.reader.password) == (writer, reader)
    monkeypatch.setenv("TESTBED_INFLUX__READER__USERNAME", "")  # compose's ${VAR:-}
    with pytest.raises(ValueError, match="TESTBED_INFLUX__READER__USERNAME"):
        Settings()


def test_the_one_user_settings_of_before_are_refused_with_what_replaces_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBED_INFLUX__USERNAME", "testbed")
    with pytest.raises(ValueError, match="no longer read.*TESTBED_INFLUX__WRITER__USERNAME"):
        Settings(environment="development", admin_token=ADMIN)
