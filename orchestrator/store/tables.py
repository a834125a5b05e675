"""ORM tables. One schema for SQLite and PostgreSQL; changed only through migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps are stored in UTC and always come back timezone-aware (SQLite drops
    the zone; comparing naive and aware datetimes is a bug waiting to happen)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UtcDateTime,
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    user: Mapped[User] = relationship()


class PageSession(Base):
    """A browser's sign-in to the pages: the cookie holds a random session secret (only
    its hash is kept), never the API token itself, so signing out revokes it here and
    the cookie is dead even if it was copied. It lives no longer than the credential
    it was opened with (``credential_hash``: an API token's hash, or the admin token's)."""

    __tablename__ = "page_sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    credential_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    user: Mapped[User] = relationship()


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    #: Bytes the project may move over its lifetime, all SIMs; NULL: unlimited.
    budget_bytes: Mapped[int | None] = mapped_column(BigInteger)


class ProjectMember(Base):
    __tablename__ = "project_members"
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), primary_key=True)


class Node(Base):
    __tablename__ = "nodes"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    country: Mapped[str] = mapped_column(String(2))
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    model: Mapped[str] = mapped_column(String(64), default="unknown")
    architecture: Mapped[str] = mapped_column(String(32), default="unknown")
    mobility: Mapped[str] = mapped_column(String(16), default="stationary")
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    maintenance: Mapped[bool] = mapped_column(Boolean, default=False)
    agent_version: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime]
    registered_at: Mapped[datetime | None]
    last_heartbeat_at: Mapped[datetime | None]
    clock_offset_s: Mapped[float | None] = mapped_column(Float)
    disk_free_bytes: Mapped[int | None] = mapped_column(BigInteger)
    spooled_bundles: Mapped[int] = mapped_column(Integer, default=0)
    #: Metadata sources the node's last heartbeat said it cannot read, and why
    #: (``{"gps": "cannot reach gpsd ..."}``); None before any metadata came.
    metadata_unavailable: Mapped[dict[str, str] | None] = mapped_column(JSON)
    interfaces: Mapped[list[Interface]] = relationship(
        back_populates="node", cascade="all, delete-orphan", order_by="Interface.name"
    )


class Interface(Base):
    """A modem interface (a SIM) of a node, as last reported by its agent."""

    __tablename__ = "interfaces"
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(16), primary_key=True)
    mcc_mnc: Mapped[str] = mapped_column(String(7))
    operator_name: Mapped[str] = mapped_column(String(64))
    rat: Mapped[str | None] = mapped_column(String(8))
    address: Mapped[str | None] = mapped_column(String(64))
    up: Mapped[bool] = mapped_column(Boolean, default=True)
    rx_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    tx_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    #: The modem behind the interface, as the agent reports it ("Quectel EM12-G").
    modem_model: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[datetime]
    node: Mapped[Node] = relationship(back_populates="interfaces")


class SimQuota(Base):
    """The data cap of a node's modem interface (its SIM), set by an operator. A quota
    may be set before the agent reports the interface; it applies to whatever SIM the
    interface holds (usage is kept per MCC-MNC, so a swapped SIM starts afresh)."""

    __tablename__ = "sim_quotas"
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"), primary_key=True)
    interface: Mapped[str] = mapped_column(String(16), primary_key=True)
    cap_bytes: Mapped[int] = mapped_column(BigInteger)
    reset_day: Mapped[int] = mapped_column(Integer, default=1)
    margin: Mapped[float] = mapped_column(Float, default=0.05)
    updated_at: Mapped[datetime]


class Campaign(Base):
    __tablename__ = "campaigns"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    #: When the planner last planned it; NULL for campaigns booked before the planner
    #: existed (they are never re-planned, so their runs are not booked twice).
    planned_at: Mapped[datetime | None]
    #: The last plan's decisions (deferred / skipped / rejected, with reasons).
    decisions: Mapped[list[Any] | None] = mapped_column(JSON)
    #: When it was cancelled, and by whom: no longer planned; its runs that had not
    #: started were cancelled, the others (and their data) kept.
    cancelled_at: Mapped[datetime | None]
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    #: When it was deleted: hidden from lists and lookups (services.campaigns). Only a
    #: campaign without data may be, so its rows stay as the runs' and quotas' journal.
    deleted_at: Mapped[datetime | None]


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    #: Its campaign, node and (once archived) bundle. No foreign keys (migration 0017):
    #: a key is a look-up per row inserted, more than half of what storing a day of
    #: bookings cost. These parents are never deleted (the database refuses it), and
    #: every writer takes them from rows of its own transaction; the planner's writer
    #: checks a day's nodes and campaigns in one query (services.bookings).
    campaign_id: Mapped[str | None] = mapped_column(String(40))
    #: The project and user it is booked for: its campaign's (whose keys check them), or
    #: for an ad-hoc run the signed-in user's and the project resolved for them. No key
    #: of their own: one trigger per row each, a seventh of storing a day of bookings,
    #: for parents that are never deleted (migration 0016).
    project_id: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[int] = mapped_column(Integer)
    node_id: Mapped[str] = mapped_column(String(64))
    interface: Mapped[str] = mapped_column(String(16))
    experiment: Mapped[str] = mapped_column(String(64))
    experiment_version: Mapped[int] = mapped_column(Integer)
    image: Mapped[str] = mapped_column(String(256))
    parameters: Mapped[dict[str, Any]] = mapped_column(JSON)
    not_before: Mapped[datetime]
    deadline: Mapped[datetime]
    forecast_bytes: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    state_reason: Mapped[str] = mapped_column(Text)
    state_at: Mapped[datetime]
    created_at: Mapped[datetime]
    bundle_sha256: Mapped[str | None] = mapped_column(String(64))
    #: When the run's results were written to the time-series store; NULL while waiting
    #: (no bundle yet, or the store was down). Derived data: can be reset and rebuilt.
    ingested_at: Mapped[datetime | None]
    ingest_note: Mapped[str | None] = mapped_column(Text)
    #: Which ingest worker is writing the run, and until when its claim holds
    #: (:mod:`orchestrator.model.worklease`); NULL when no worker holds it.
    ingest_claim: Mapped[str | None] = mapped_column(String(64))
    ingest_lease_until: Mapped[datetime | None]
    # The quota reservation (NULL for runs booked before quotas existed). The runs table
    # is the ledger's journal: usage per SIM and period is summed from these columns.
    mcc_mnc: Mapped[str | None] = mapped_column(String(7))
    reserved_bytes: Mapped[int | None] = mapped_column(BigInteger)
    reservation_period: Mapped[datetime | None]
    #: Bytes the agent measured on the interface (both directions), when reported.
    measured_bytes: Mapped[int | None] = mapped_column(BigInteger)
    #: What the settlement rule (orchestrator.quotas.settlement) decided, stored as
    #: decided: the bytes charged and the part of them beyond the reservation. Usage
    #: sums these, so no query repeats the rule. NULL until settled.
    charged_bytes: Mapped[int | None] = mapped_column(BigInteger)
    overrun_bytes: Mapped[int | None] = mapped_column(BigInteger)
    settled_at: Mapped[datetime | None]
    #: When the node fell silent while holding the run (its last heartbeat), set while
    #: the run is ``unreachable``; NULL otherwise.
    silent_since: Mapped[datetime | None]
    #: Seconds the node was out of contact during the run, summed over its silences;
    #: NULL when it never was. Named in the run's note when its bundle arrives.
    out_of_contact_s: Mapped[float | None] = mapped_column(Float)
    #: The link rate the run measured (TAT mean), bit/s: the planner's rate history.
    measured_rate_bps: Mapped[float | None] = mapped_column(Float)
    # The campaign session the run belongs to (the planner's SessionKey).
    session_occurrence: Mapped[datetime | None]
    session_interfaces: Mapped[str | None] = mapped_column(String(128))
    step: Mapped[int | None] = mapped_column(Integer)
    repetition: Mapped[int | None] = mapped_column(Integer)
    #: The transitions after its booking; the booking itself (to ``scheduled``) is the
    #: row's creation, derived, not stored (orchestrator.model.booking).
    events: Mapped[list[RunEvent]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="RunEvent.id"
    )
    campaign: Mapped[Campaign | None] = relationship(
        primaryjoin="foreign(Run.campaign_id) == Campaign.id")

    __table_args__ = (
        Index("ix_runs_node_state", "node_id", "state"),
        # Runs by state, and those that ended lately by state (the metrics' failed-run
        # rate per operator); it serves every lookup by state alone too.
        Index("ix_runs_state_at", "state", "state_at"),
        Index("ix_runs_campaign", "campaign_id"),
        Index("ix_runs_sim_period", "node_id", "interface", "reservation_period"),
    )


class RunEvent(Base):
    """One timestamped, explained transition of a run after its booking; with the
    booking derived from the run's row, the run's history."""

    __tablename__ = "run_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime]
    run: Mapped[Run] = relationship(back_populates="events")


class Upload(Base):
    """A resumable upload of a run's bundle, as declared; bytes accumulate in a part
    file. Its offset is not stored: it is the part file's size (one truth, as tus), and
    it is complete when the run holds the bundle declared here."""

    __tablename__ = "uploads"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    #: Every byte accepted, resends included (a counter for metrics, not the offset).
    bytes_received: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime]
    #: When the last chunk arrived: an upload idle too long is expired.
    updated_at: Mapped[datetime]


class Bundle(Base):
    """An archived bundle, stored once by content hash however often it is uploaded."""

    __tablename__ = "bundles"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(Text)
    files: Mapped[int] = mapped_column(Integer)
    stored_at: Mapped[datetime]


class DatasetRelease(Base):
    """A dataset release built through the API, and its job (services.releases): its
    files are in ``settings.datasets.dir/<id>``; ``state`` building, ready or failed,
    ``job`` the job running on it (build or verify) while one does."""

    __tablename__ = "dataset_releases"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    job: Mapped[str | None] = mapped_column(String(16))
    campaigns: Mapped[list[Any]] = mapped_column(JSON)
    #: The request's options as given (period, version, licence, ...).
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    version: Mapped[str] = mapped_column(String(64))
    key_name: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    #: The job's last sign of life (its heartbeat).
    updated_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    runs_read: Mapped[int] = mapped_column(Integer, default=0)
    runs_total: Mapped[int] = mapped_column(Integer, default=0)
    #: Once ready: runs published, rows per table, files and bytes, runs left out.
    runs: Mapped[int | None] = mapped_column(Integer)
    rows: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    files: Mapped[int | None] = mapped_column(Integer)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    excluded: Mapped[list[Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    #: The last verification: when, and its problems (empty: all good).
    verified_at: Mapped[datetime | None]
    problems: Mapped[list[Any] | None] = mapped_column(JSON)

    __table_args__ = (Index("ix_dataset_releases_created_at", "created_at"),)


class DatasetExclusion(Base):
    """A run, node or SIM (``node/interface``) left out of every dataset release, and
    why (orchestrator.services.datasets); the reason is printed in each release."""

    __tablename__ = "dataset_exclusions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))
    target: Mapped[str] = mapped_column(String(160))
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]

    __table_args__ = (
        UniqueConstraint("kind", "target", name="uq_dataset_exclusions_kind_target"),
    )


class Lease(Base):
    """A lease on a job only one replica may run (``services.leader``): held by
    ``holder`` until ``expires_at`` by the database's clock, renewed while it runs."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime]
