"""Orchestrator settings: typed, grouped, documented with units and why the default.

Read from ``TESTBED_*`` environment variables (``TESTBED_HEALTH__HEARTBEAT_INTERVAL_S``
for nested groups). Built by the caller and passed in (``create_app(settings)``);
nothing is read at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_TOKEN = "change-me"
#: Shortest admin token accepted outside development, characters: 32 hex digits are
#: 128 random bits, what `openssl rand -hex 16` gives (scripts/up makes 64).
MIN_ADMIN_TOKEN_CHARS = 32
#: Fewest distinct characters in an admin token outside development: "aaaa..." and
#: "abab..." fall short, while 32 random hex digits have fewer than 8 distinct with a
#: chance of 3.5e-8 (an occupancy count over 16 symbols), 64 of them practically never.
MIN_ADMIN_TOKEN_DISTINCT = 8
#: Words that mark a token copied from an example rather than generated.
PLACEHOLDER_WORDS = ("change-me", "changeme", "change_me", "placeholder", "example",
                     "password", "secret", "replace-me", "your-token", "admin-token")
HOW_TO_GENERATE = "generate one with `openssl rand -hex 32`"


def weak_secret(token: str) -> str | None:
    """Why ``token`` is no fit secret (too short, a placeholder, too few distinct
    characters to be random), or None when it will do."""
    lowered = token.lower()
    if not token:
        return "unset"
    word = next((w for w in PLACEHOLDER_WORDS if w in lowered), None)
    if word is not None:
        return f"a placeholder (it contains {word!r})"
    if len(token) < MIN_ADMIN_TOKEN_CHARS:
        return f"{len(token)} characters long, under {MIN_ADMIN_TOKEN_CHARS}"
    if len(set(token)) < MIN_ADMIN_TOKEN_DISTINCT:
        return (f"made of only {len(set(token))} distinct characters, not random "
                f"(at least {MIN_ADMIN_TOKEN_DISTINCT})")
    return None


class HealthSettings(BaseModel):
    #: Agents heartbeat this often. 60 s as MONROE; demos and tests compress it.
    heartbeat_interval_s: float = Field(60.0, gt=0)
    #: Missed heartbeats before a node is stale (kept booked) ...
    stale_after_beats: float = Field(3.0, gt=0)
    #: ... and before it is offline (its deploying and running runs become
    #: ``unreachable``, its assigned ones fail with a reason).
    offline_after_beats: float = Field(10.0, gt=0)
    #: How often the reaper looks for offline nodes and overdue runs, seconds.
    reap_interval_s: float = Field(5.0, gt=0)
    #: The lease on the reaper and the planner's periodic pass, seconds, when replicas
    #: share a PostgreSQL database (``model.lease``): renewed every third of it; when
    #: its holder dies another replica leads within 4/3 of it.
    leader_lease_s: float = Field(15.0, gt=0)
    #: Grace after a run's deadline for its node to report an end, seconds.
    deadline_grace_s: float = Field(60.0, ge=0)
    #: How long a finished run may wait for its bundle, seconds. Nodes keep bundles in
    #: a spool through outages, so this is long: 14 days.
    upload_wait_s: float = Field(14 * 86400.0, gt=0)
    #: How long an ``unreachable`` run (its node fell silent while holding it) waits for
    #: word from the node before it fails, its whole reservation charged, seconds. Nodes
    #: on trains or rural sites are out of contact for hours: 7 days.
    unreachable_horizon_s: float = Field(7 * 86400.0, gt=0)

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
    #: A JSON or JSON-lines file of a bundle that is parsed whole (a result for the
    #: rate and the result page, one for ingest), bytes. A parsed document costs up to
    #: ~25 times its size in memory; the testbed's largest (an hour of iperf3 intervals)
    #: is ~8 MB. A larger file stays in the archive, unparsed, with a note on the run.
    max_result_json_bytes: int = Field(16 * 1024**2, gt=0)
    #: A capture (pcap/pcapng) that ingest analyses into flow points, bytes. It is spooled
    #: to a temporary file and streamed by testbed-flows (tens of MB whatever its size),
    #: so this bounds temporary disk and time; only the Python fallback, where the tool
    #: is missing, holds the capture and its packets in memory. A larger one stays in the
    #: archive, unanalysed, with a note on the run. 128 MiB is a header-only capture of
    #: about an hour at 20 Mbit/s.
    max_ingest_capture_bytes: int = Field(128 * 1024**2, gt=0)
    #: An unfinished upload with no chunk for this long is dropped, seconds; its agent,
    #: should it come back, resends from offset 0. 3 days: a node off over a weekend
    #: resumes, and a part abandoned for good (its run's bundle lost or refused on the
    #: node) stops taking disk long before its run's 14-day bundle wait ends.
    part_idle_expire_s: float = Field(3 * 86400.0, gt=0)
    #: Bytes one node may hold in unfinished uploads at once. An agent uploads one
    #: bundle at a time, so two largest bundles (1 GiB) leave room for one abandoned
    #: part; a node over it gets 507 and retries once parts expire.
    max_part_bytes_per_node: int = Field(1024**3, gt=0)


    @model_validator(mode="after")
    def _room_for_one_bundle(self) -> UploadSettings:
        if self.max_part_bytes_per_node < self.max_bundle_bytes:
            raise ValueError(
                "max_part_bytes_per_node must be at least max_bundle_bytes, or the largest "
                "bundle could never be uploaded"
            )
        return self


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
    #: How far ahead a node is handed its booked runs, seconds (the heartbeat reply
    #: carries every run due within it, and the node keeps them on its disk). A day:
    #: a node on a train or at a rural site loses its control link for hours and must
    #: go on measuring from what it holds. At most ``horizon_s``: the planner books no
    #: further, so a longer hand-out would hold nothing more.
    handout_horizon_s: float = Field(86400.0, gt=0)
    #: Most runs of the hand-out horizon a node is handed, earliest first, counting
    #: those it holds (the later ones follow as earlier ones start). 500 assignments are
    #: ~250 kB of JSON in one reply, and more than a day of a busy node's runs; at most
    #: 1000, the bound of the heartbeat's list of held runs.
    handout_max_runs: int = Field(500, ge=1, le=1000)
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
    #: How far after submission any date of a campaign may lie, days (its recurrence's
    #: start, end, first and last day, its time anchor). Three years: longer than the
    #: campaigns the platform serves (MONROE's ran for months), and it keeps every
    #: date's arithmetic far from the calendar's end (a start in year 9999 once made
    #: every planning pass raise). At most 20 years (scheduling.bounds.LATEST holds
    #: stored specs to 2200 whatever this says).
    campaign_max_ahead_days: float = Field(3 * 366, gt=0, le=20 * 366)

    @model_validator(mode="after")
    def _handout_within_booking(self) -> SchedulingSettings:
        if self.handout_horizon_s > self.horizon_s:
            raise ValueError(
                f"TESTBED_SCHEDULING__HANDOUT_HORIZON_S ({self.handout_horizon_s:.0f} s) is "
                f"longer than the planner books ahead (TESTBED_SCHEDULING__HORIZON_S, "
                f"{self.horizon_s:.0f} s): nodes could never hold that much; raise "
                "HORIZON_S or lower HANDOUT_HORIZON_S")
        return self


class InfluxCredential(BaseModel):
    """One InfluxDB user (HTTP basic auth on the v1 API). Unset (no username): no
    credential is sent, which only an InfluxDB without authentication accepts."""

    #: Empty is unset, so that a compose file can pass ``${VAR:-}`` through.
    username: str | None = None
    password: str | None = None

    @field_validator("username", "password")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    @property
    def given(self) -> bool:
        return self.username is not None


#: The variables of each InfluxDB credential, for messages that say what to set.
INFLUX_WRITER_VARS = "TESTBED_INFLUX__WRITER__USERNAME and TESTBED_INFLUX__WRITER__PASSWORD"
INFLUX_READER_VARS = "TESTBED_INFLUX__READER__USERNAME and TESTBED_INFLUX__READER__PASSWORD"


class InfluxSettings(BaseModel):
    """The time-series store (InfluxDB v1 HTTP API; 2.x and 3.x serve it too).

    Two users, each with the least it needs (docs/security.md): the writer (WRITE on
    ``database``) for ingest, ``testbed timeseries rebuild``, the quota and live
    metadata points; the reader (READ on it) for every query: the pages and the
    planner's proxy-mode decisions. A query the pages build can then never write or
    drop, whatever it holds. Neither is an administrator: the store's own start
    (deploy/influxdb/influxdb-start) makes the database and both users."""

    #: Base URL, e.g. http://influxdb:8086. Unset: no time series are written (the raw
    #: archive is still complete and `testbed timeseries rebuild` can fill them later).
    url: str | None = None
    database: str = "testbed"
    #: WRITE on ``database``. Required with ``url`` outside development.
    writer: InfluxCredential = InfluxCredential()
    #: READ on ``database``; a user of its own, not the writer. Required with ``url``
    #: outside development; in development, unset means queries go as the writer.
    reader: InfluxCredential = InfluxCredential()
    #: Points per write request; 5000 is InfluxData's recommended batch for 1.x.
    batch_size: int = Field(5000, ge=1)
    #: How often archived runs not yet in the store are retried, seconds.
    ingest_interval_s: float = Field(5.0, gt=0)
    #: How long an ingest worker's claim on a run holds, seconds: a worker that died
    #: holding a run is taken over after this. Longer than converting and writing the
    #: largest bundle takes (a worker renews right before it writes).
    ingest_lease_s: float = Field(120.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _one_user_is_gone(cls, data: object) -> object:
        if isinstance(data, dict) and ({"username", "password"} & set(data)):
            raise ValueError(
                "TESTBED_INFLUX__USERNAME and TESTBED_INFLUX__PASSWORD are no longer read: "
                f"the orchestrator uses two InfluxDB users, set {INFLUX_WRITER_VARS} "
                f"(WRITE on the database) and {INFLUX_READER_VARS} (READ on it); "
                "docs/security.md")
        return data

    def problems(self) -> list[str]:
        """Why these settings are unfit outside development, one sentence each: every
        store needs both users (InfluxDB runs with authentication), each with a real
        password, and the reader may not be the writer."""
        if self.url is None:
            return []
        found = []
        for role, cred, names in (("writer", self.writer, INFLUX_WRITER_VARS),
                                  ("reader", self.reader, INFLUX_READER_VARS)):
            if not cred.given:
                found.append(f"TESTBED_INFLUX__URL is set but the {role}'s user is not: set "
                             f"{names} (scripts/up generates them for compose; "
                             "docs/security.md)")
            elif (why := weak_secret(cred.password or "")) is not None:
                found.append(f"the InfluxDB {role}'s password is {why}; {HOW_TO_GENERATE}")
        if self.writer.given and self.writer.username == self.reader.username:
            found.append("the InfluxDB reader and writer are the same user: the reader must "
                         "be a user of its own with READ only, so that what the pages query "
                         f"can never write ({INFLUX_READER_VARS})")
        return found


class DatasetSettings(BaseModel):
    """Dataset releases built through the API (docs/open-data.md)."""

    #: Where releases are written and served from, one folder each.
    dir: Path = Path("./releases")
    #: Release keys (one file per key name), never served: a key undoes a release's
    #: anonymisation. Keep it off the releases' folder.
    keys_dir: Path = Path("./release-keys")
    #: Release jobs (builds and verifications) at once, across replicas: each reads the
    #: archive and holds a core for minutes on a large campaign.
    max_jobs: int = Field(1, ge=1, le=16)
    #: How often a job says it is alive, seconds; a job silent for three of these (its
    #: process stopped) is reported as interrupted.
    heartbeat_s: float = Field(30.0, gt=0, le=3600)
    #: Bytes a build leaves free on the releases' file system, which is also the
    #: archive's and the uploads' in compose and on a cluster: a release that filled it
    #: would turn the nodes' uploads away. 2 GiB: four of the largest bundles
    #: (uploads.max_bundle_bytes).
    reserve_bytes: int = Field(2 * 1024**3, ge=0)
    #: The largest release a build writes, bytes: a period of years or a raw release of
    #: a month's captures asked by mistake is refused before it takes the disk. 200 GiB.
    max_release_bytes: int = Field(200 * 1024**3, ge=1)


class FleetSettings(BaseModel):
    """Nodes made at start, before the API serves (services.fleetfile): the compose
    stack's emulated fleet starts in the control plane's compose call, its tokens made
    beforehand, with no provisioning step in between."""

    #: A fleet file (deploy/fleet/nodes.yaml: ``nodes:``, each as `testbed node add`
    #: takes it). Only its nodes with a hash below are made.
    file: Path | None = None
    #: ``ID=SHA256HEX`` items (commas or spaces between): the SHA-256 of each node's
    #: token, hex. The tokens themselves never reach the orchestrator.
    token_hashes: str = ""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TESTBED_", env_nested_delimiter="__")

    environment: Literal["development", "production"] = "production"
    #: SQLAlchemy URL. SQLite by default; PostgreSQL only needs another URL.
    database_url: str = "sqlite:///./testbed.db"
    #: How long the start waits for the database to accept connections, seconds (0: not
    #: at all, fail at once). Compose starts the orchestrators beside PostgreSQL and sets it.
    database_wait_s: float = Field(0.0, ge=0, le=3600)
    #: Raw archive root: bundles byte for byte, keyed campaign/node/run.
    archive_dir: Path = Path("./archive")
    #: Partial uploads live here until complete.
    upload_dir: Path = Path("./uploads")
    #: Experiment catalogue: one folder per experiment with experiment.yaml.
    experiments_dir: Path = Path("./experiments")
    #: Token of the bootstrap administrator (creates users and nodes). Outside
    #: development it must pass :func:`weak_secret` (docs/security.md).
    admin_token: str = PLACEHOLDER_TOKEN
    #: Bearer token Prometheus sends to scrape ``/metrics`` in full (per-node and per-SIM
    #: series, with node ids). Unset or empty: ``/metrics`` shows only fleet aggregates
    #: to a scraper without the admin token (empty, so that a compose file can pass
    #: ``${TESTBED_METRICS_TOKEN:-}`` through whether or not it is set).
    metrics_token: str | None = None
    host: str = "0.0.0.0"
    port: int = 8080
    health: HealthSettings = HealthSettings()
    uploads: UploadSettings = UploadSettings()
    api: ApiSettings = ApiSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    influx: InfluxSettings = InfluxSettings()
    datasets: DatasetSettings = DatasetSettings()
    fleet: FleetSettings = FleetSettings()

    @field_validator("metrics_token")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    @model_validator(mode="after")
    def _no_placeholder_secret(self) -> Settings:
        why = weak_secret(self.admin_token)
        if self.environment != "development" and why is not None:
            raise ValueError(
                f"TESTBED_ADMIN_TOKEN is {why}; {HOW_TO_GENERATE} (scripts/up does), "
                "or run with TESTBED_ENVIRONMENT=development"
            )
        if (self.environment != "development" and self.metrics_token is not None
                and (self.metrics_token == PLACEHOLDER_TOKEN or len(self.metrics_token) < 16)):
            raise ValueError(
                "TESTBED_METRICS_TOKEN is the placeholder or shorter than 16 characters; "
                "set a random token (e.g. `openssl rand -hex 24`) or leave it unset"
            )
        if self.environment != "development" and (found := self.influx.problems()):
            raise ValueError("; ".join(found) + ", or run with TESTBED_ENVIRONMENT=development")
        return self
