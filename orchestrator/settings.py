"""Orchestrator settings: typed, grouped, documented with units and why the default.

Read from ``TESTBED_*`` environment variables (``TESTBED_HEALTH__HEARTBEAT_INTERVAL_S``
for nested groups). Built by the caller and passed in (``create_app(settings)``);
nothing is read at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_TOKEN = "change-me"


class HealthSettings(BaseModel):
    #: Agents heartbeat this often. 60 s as MONROE; demos and tests compress it.
    heartbeat_interval_s: float = Field(60.0, gt=0)
    #: Missed heartbeats before a node is stale (kept booked) ...
    stale_after_beats: float = Field(3.0, gt=0)
    #: ... and before it is offline (its active runs fail with a reason).
    offline_after_beats: float = Field(10.0, gt=0)
    #: How often the reaper looks for offline nodes and overdue runs, seconds.
    reap_interval_s: float = Field(5.0, gt=0)
    #: Grace after a run's deadline for its node to report an end, seconds.
    deadline_grace_s: float = Field(60.0, ge=0)
    #: How long a finished run may wait for its bundle, seconds. Nodes keep bundles in
    #: a spool through outages, so this is long: 14 days.
    upload_wait_s: float = Field(14 * 86400.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> HealthSettings:
        if self.offline_after_beats <= self.stale_after_beats:
            raise ValueError("offline_after_beats must exceed stale_after_beats")
        return self


class UploadSettings(BaseModel):
    #: Largest bundle accepted, bytes. 512 MiB fits an hour of header-only pcaps.
    max_bundle_bytes: int = Field(512 * 1024**2, gt=0)
    #: Largest single PATCH chunk, bytes; the agent sends 1 MiB.
    max_chunk_bytes: int = Field(16 * 1024**2, gt=0)
    #: What a bundle may unpack to, bytes (zip-bomb guard).
    max_unpacked_bytes: int = Field(2 * 1024**3, gt=0)


class ApiSettings(BaseModel):
    #: Largest request body of every route but the upload chunks', bytes. 1 MiB holds a
    #: heartbeat with 64 modems' metadata or a long campaign many times over; what is
    #: over it is refused (413) before it is read, so a body cannot cost more memory.
    max_body_bytes: int = Field(1024**2, gt=0)


class SchedulingSettings(BaseModel):
    #: Gap kept between two runs on one node, seconds (container start/stop, radio idle).
    padding_s: float = Field(5.0, ge=0)
    #: Expected link rate when a SIM has no history yet, bit/s (for volume forecasts).
    default_rate_bps: float = Field(20e6, gt=0)
    #: A scheduled run not started this long after its slot begins expires, seconds.
    expire_after_s: float = Field(3600.0, gt=0)
    #: How far ahead the campaign planner books, wall-clock seconds. A day: far enough
    #: for nodes to prefetch, short enough that quota reservations are not tied up for
    #: weeks and that a changed cap or a new campaign takes effect by tomorrow.
    horizon_s: float = Field(86400.0, gt=0)
    #: How often campaigns are re-planned, seconds (also at once after a run fails, a
    #: node changes health, or a quota changes).
    replan_interval_s: float = Field(60.0, gt=0)
    #: How many times a campaign session is planned in all: a session whose runs all
    #: failed (or expired) is booked again while its window allows, up to this count.
    session_attempts: int = Field(2, ge=1, le=10)
    #: Cap for a SIM with none configured, bytes per month; NULL (the default): such a
    #: SIM is not booked at all ("no_quota"), since mobile data costs money and a cap
    #: must be stated. The emulated fleet and demos set one (e.g. 2000000000).
    default_sim_cap_bytes: int | None = Field(None, ge=0)
    #: Share of each cap kept free of reservations (forecast error, background traffic).
    #: 0.05: reservations stop at 95 %.
    quota_margin: float = Field(0.05, ge=0, lt=1)


class InfluxSettings(BaseModel):
    """The time-series store (InfluxDB v1 HTTP API; 2.x and 3.x serve it too)."""

    #: Base URL, e.g. http://influxdb:8086. Unset: no time series are written (the raw
    #: archive is still complete and `testbed timeseries rebuild` can fill them later).
    url: str | None = None
    database: str = "testbed"
    username: str | None = None
    password: str | None = None
    #: Points per write request; 5000 is InfluxData's recommended batch for 1.x.
    batch_size: int = Field(5000, ge=1)
    #: How often archived runs not yet in the store are retried, seconds.
    ingest_interval_s: float = Field(5.0, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TESTBED_", env_nested_delimiter="__")

    environment: Literal["development", "production"] = "production"
    #: SQLAlchemy URL. SQLite by default; PostgreSQL only needs another URL.
    database_url: str = "sqlite:///./testbed.db"
    #: Raw archive root: bundles byte for byte, keyed campaign/node/run.
    archive_dir: Path = Path("./archive")
    #: Partial uploads live here until complete.
    upload_dir: Path = Path("./uploads")
    #: Experiment catalogue: one folder per experiment with experiment.yaml.
    experiments_dir: Path = Path("./experiments")
    #: Token of the bootstrap administrator (creates users and nodes).
    admin_token: str = PLACEHOLDER_TOKEN
    #: Bearer token Prometheus sends to scrape ``/metrics`` in full (per-SIM series,
    #: with node ids). Without it, or unset, ``/metrics`` shows only fleet aggregates.
    metrics_token: str | None = None
    host: str = "0.0.0.0"
    port: int = 8080
    health: HealthSettings = HealthSettings()
    uploads: UploadSettings = UploadSettings()
    api: ApiSettings = ApiSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    influx: InfluxSettings = InfluxSettings()

    @model_validator(mode="after")
    def _no_placeholder_secret(self) -> Settings:
        if self.environment != "development" and (
            self.admin_token == PLACEHOLDER_TOKEN or len(self.admin_token) < 16
        ):
            raise ValueError(
                "TESTBED_ADMIN_TOKEN is unset, the placeholder, or shorter than 16 "
                "characters; set a random token (e.g. `openssl rand -hex 24`) or run with "
                "TESTBED_ENVIRONMENT=development"
            )
        if (self.environment != "development" and self.metrics_token is not None
                and (self.metrics_token == PLACEHOLDER_TOKEN or len(self.metrics_token) < 16)):
            raise ValueError(
                "TESTBED_METRICS_TOKEN is the placeholder or shorter than 16 characters; "
                "set a random token (e.g. `openssl rand -hex 24`) or leave it unset"
            )
        return self
