"""Request and response schemas of the public API (``XCreate`` in, ``XPublic`` out),
kept apart from the ORM tables so the stored shape can change without breaking clients."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from testbed_common.bounds import (
    TEXT_PATTERN,
    ByteCount,
    ExperimentStr,
    Instant,
    InterfaceStr,
    Label32,
    Label64,
    Label128,
    NameList,
    NameStr,
    NodeIdStr,
    Reason,
    RecordIdStr,
    TagList,
    TimezoneStr,
    merged,
)
from testbed_common.states import NodeHealth, RunState


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: An API token's lifetime in days (at most a century, finite); none: it never expires.
TokenDays = Annotated[float | None, Field(gt=0, le=36500, allow_inf_nan=False)]


class UserCreate(_In):
    name: NameStr
    is_admin: bool = False
    #: Projects the user joins; duplicates are merged.
    projects: NameList = []
    #: Token lifetime in days, up to a century; none means it never expires.
    token_days: TokenDays = None


class UserToken(BaseModel):
    user: str
    #: Shown once; only its hash is stored.
    token: str
    expires_at: datetime | None
    #: The token's id, to revoke this one alone (testbed user revoke NAME --token ID).
    token_id: int


class TokenCreate(_In):
    #: Token lifetime in days; none means it never expires.
    token_days: TokenDays = None


class TokenPublic(BaseModel):
    """An API token as its owner and administrators see it (never the secret)."""

    id: int
    user: str
    created_at: datetime
    expires_at: datetime | None
    revoked: bool


class TokensRevoked(BaseModel):
    user: str
    #: API tokens revoked by this call (already revoked ones are not counted).
    tokens: int
    #: Pages sign-ins ended by this call.
    sessions: int


class ProjectCreate(_In):
    name: NameStr


class ProjectPublic(BaseModel):
    name: str
    members: list[str]


class NodeCreate(_In):
    id: NodeIdStr = Field(examples=["se-01"])
    country: str = Field(pattern=r"^[A-Z]{2}$", examples=["SE"])
    timezone: TimezoneStr = Field("UTC", examples=["Europe/Stockholm"])
    model: Label64 = "unknown"
    architecture: Label32 = "unknown"
    mobility: str = Field("stationary", pattern=r"^(stationary|mobile)$")
    #: Duplicates are merged.
    tags: TagList = []


class InterfacePublic(BaseModel):
    name: str
    mcc_mnc: str
    operator: str
    rat: str | None
    address: str | None
    up: bool
    rx_bytes: int
    tx_bytes: int
    modem_model: str | None = None
    updated_at: datetime


class NodePublic(BaseModel):
    id: str
    health: NodeHealth
    country: str
    timezone: str
    model: str
    architecture: str
    mobility: str
    tags: list[str]
    maintenance: bool
    agent_version: str | None
    registered_at: datetime | None
    last_heartbeat_at: datetime | None
    clock_offset_s: float | None
    disk_free_bytes: int | None
    spooled_bundles: int
    interfaces: list[InterfacePublic]
    #: Metadata sources the node cannot read, and why ({"gps": "cannot reach gpsd ..."}).
    metadata_unavailable: dict[str, str] = {}


class NodeCreated(BaseModel):
    node: NodePublic
    #: Shown once: give it to the node's agent (TESTBED_NODE_TOKEN).
    token: str


class MaintenanceUpdate(_In):
    maintenance: bool
    reason: Reason = "set by an operator"


class RunCreate(_In):
    experiment: ExperimentStr
    node: NodeIdStr
    interface: InterfaceStr
    parameters: dict[str, Any] = {}
    project: NameStr = "default"
    #: Earliest start; default now. The run gets the first free slot after it.
    not_before: Instant | None = None


class RunEventPublic(BaseModel):
    state: RunState
    reason: str
    source: str
    at: datetime


class RunPublic(BaseModel):
    id: str
    campaign: str | None
    project: str
    node: str
    interface: str
    experiment: str
    experiment_version: int
    image: str
    parameters: dict[str, Any]
    not_before: datetime
    deadline: datetime
    forecast_bytes: int
    state: RunState
    reason: str
    state_at: datetime
    bundle_sha256: str | None
    #: What the time-series ingest of the run's bundle skipped or found damaged.
    ingest_note: str | None = None
    #: Quota: the SIM (MCC-MNC) reserved against, the reservation, what the agent
    #: measured, what the ledger charged at settlement and what of that was beyond the
    #: reservation (None until then).
    mcc_mnc: str | None = None
    reserved_bytes: int | None = None
    measured_bytes: int | None = None
    charged_bytes: int | None = None
    overrun_bytes: int | None = None
    #: The campaign session (window's nominal start, campaign time) it belongs to.
    session: datetime | None = None
    events: list[RunEventPublic] = []


class RunCancel(_In):
    reason: Reason = "cancelled by user"


class ExperimentPublic(BaseModel):
    name: str
    version: int
    description: str
    image: str
    parameters: dict[str, Any]
    result: dict[str, Any]
    duration_s: str
    data_volume_bytes: str
    #: The platforms its image provides (``linux/amd64``, ``linux/arm64``): it is booked
    #: only on nodes of those architectures.
    platforms: list[str] = ["linux/amd64"]
    #: Its image needs the native tools: nodes tagged ``no-native-tools`` do not get it.
    native_tools: bool = False


class DecisionPublic(BaseModel):
    """Why sessions were not booked: ``deferred`` (may run after a re-plan),
    ``skipped`` (that occurrence will not run) or ``rejected`` (fix the spec or quota)."""

    kind: str
    code: str
    message: str
    node: str | None = None
    interface: str | None = None
    mcc_mnc: str | None = None
    count: int = 1
    first: datetime | None = None
    last: datetime | None = None


class CampaignPublic(BaseModel):
    id: str
    name: str
    project: str
    created_at: datetime
    runs: list[RunPublic]
    #: Messages of the skipped and rejected decisions (kept for older clients).
    skipped: list[str]
    spec: dict[str, Any]
    planned_at: datetime | None = None
    decisions: list[DecisionPublic] = []
    #: Who submitted it (with administrators, the only one who may cancel or delete it).
    owner: str = ""
    #: Set once cancelled: no further bookings ("campaign cancelled by alice").
    cancelled_at: datetime | None = None
    cancel_reason: str | None = None


class CampaignSummary(BaseModel):
    """A campaign in a list: its runs counted by state and the planner's decisions."""

    id: str
    name: str
    project: str
    created_at: datetime
    planned_at: datetime | None = None
    runs: dict[str, int]
    decisions: list[DecisionPublic] = []
    owner: str = ""
    cancelled_at: datetime | None = None
    cancel_reason: str | None = None


class QuotaUpdate(_In):
    #: Monthly data cap of the SIM, bytes (both directions).
    cap_bytes: ByteCount
    #: Day of month the cap resets, node local time; 29-31 mean "or the last day".
    reset_day: int = Field(1, ge=1, le=31)
    #: Share of the cap kept free of reservations (0.05: booking stops at 95 %).
    margin: float = Field(0.05, ge=0, lt=1, allow_inf_nan=False)


class SimQuotaPublic(BaseModel):
    node: str
    interface: str
    mcc_mnc: str | None
    operator: str | None
    #: "configured" (set for this SIM), "default" (settings.scheduling), or "none"
    #: (nothing is booked on it).
    source: str
    limit: int | None  # the cap, bytes
    usable: int | None  # the cap less the margin
    reset_day: int | None
    margin: float | None
    used: int
    reserved: int
    remaining: int | None
    overrun: int
    period_start: datetime | None
    period_end: datetime | None


class ProjectQuotaPublic(BaseModel):
    project: str
    limit: int | None  # the budget, bytes; None: unlimited
    used: int
    reserved: int
    remaining: int | None
    overrun: int


class QuotasPublic(BaseModel):
    sims: list[SimQuotaPublic]
    projects: list[ProjectQuotaPublic]


class BudgetUpdate(_In):
    #: Bytes the project may move over its lifetime, all SIMs; None: unlimited.
    budget_bytes: ByteCount | None


class PlanPublic(BaseModel):
    """What one planning pass did."""

    planned_at: datetime
    campaigns: int
    runs_booked: int
    decisions: int


#: A SIM as ``node/interface``.
SimStr = Annotated[str, StringConstraints(
    pattern=r"^[a-z0-9][a-z0-9-]{0,62}/[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$", max_length=79)]
#: The name of a release key kept by the orchestrator (a file name: no path).
KeyNameStr = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
#: An emulated link's profile (YAML), 64 KiB at most.
ProfileText = Annotated[str, StringConstraints(pattern=TEXT_PATTERN, max_length=65536)]
#: ``KIND:ID=REASON``, as ``testbed dataset build --exclude`` takes it.
ExclusionStr = Annotated[str, StringConstraints(pattern=TEXT_PATTERN, min_length=1,
                                                max_length=2300)]


class ReleaseCreate(_In):
    """A dataset release of campaigns: the options of ``testbed dataset build``."""

    #: Campaign ids (at most 20; duplicates merged).
    campaigns: Annotated[list[RecordIdStr], Field(min_length=1, max_length=20),
                         AfterValidator(merged)]
    #: First and last day, UTC, both included; none: from the first run, to the last.
    from_day: date | None = None
    to_day: date | None = None
    #: A daily release of this day (UTC): the period that day, the version the day.
    daily: date | None = None
    #: Release version, e.g. 1.0.0 (default), or the day of a daily release.
    version: Label64 | None = None
    #: A ready release of this orchestrator whose changelog this one continues.
    previous: RecordIdStr | None = None
    #: The name of the release key the orchestrator keeps (made when new). The same key
    #: and inputs give a byte-identical release, and the same pseudonyms; default: a new
    #: key named after the release. Keys are never served.
    key: KeyNameStr | None = None
    #: SPDX id of the licence: CC-BY-4.0, CC-BY-SA-4.0, CC0-1.0 or ODbL-1.0.
    licence: Label64 = "CC-BY-4.0"
    #: Authors to cite (at most 20); default the testbed's operators.
    authors: Annotated[list[Label128], Field(max_length=20)] = []
    pseudonymise_nodes: bool = False
    #: Position grid, degrees (0 keeps positions exact; 10 at most).
    grid_deg: float = Field(0.01, ge=0, le=10, allow_inf_nan=False)
    #: Add each run's results and records, anonymised (raw/).
    raw: bool = False
    #: Left out of this release only, ``KIND:ID=REASON`` (run, node or sim).
    exclude: Annotated[list[ExclusionStr], Field(max_length=100)] = []
    #: SIM (``node/interface``) -> its emulated link's profile, copied in.
    link_profiles: Annotated[dict[SimStr, ProfileText], Field(max_length=64)] = {}


class ExclusionCreate(_In):
    """A run, node or SIM to leave out of every dataset release from now on."""

    kind: Literal["run", "node", "sim"]
    #: The run's id, the node's id, or the SIM as ``node/interface``.
    target: Annotated[str, StringConstraints(pattern=TEXT_PATTERN, min_length=1,
                                             max_length=160)]
    #: Why, printed in every release that leaves it out ("owner withdrew consent").
    reason: Reason


class ExclusionPublic(BaseModel):
    """A recorded exclusion. ``rule``: ``kind:target``, as the CLI writes it."""

    id: int
    kind: str
    target: str
    rule: str
    reason: str
    #: When it was recorded, or its reason last replaced.
    created_at: datetime


class ExcludedRunPublic(BaseModel):
    run: str
    reason: str


class ReleasePublic(BaseModel):
    """A dataset release and its job. ``state``: ``building`` (a job is writing it),
    ``ready`` (its files are served) or ``failed`` (``error`` says why; nothing is
    served). ``job``: ``build`` or ``verify`` while one runs, else none."""

    id: str
    state: str
    job: str | None
    campaigns: list[str]
    options: dict[str, Any]
    version: str
    #: The name of the key it was anonymised with (the key itself is never served).
    key: str
    created_by: str
    created_at: datetime
    #: The job's last sign of life.
    updated_at: datetime
    finished_at: datetime | None
    #: Runs read so far of those in the period, while building.
    runs_read: int
    runs_total: int
    #: Once ready: runs published, rows per table, files and bytes, runs left out.
    runs: int | None
    rows: dict[str, int] | None
    files: int | None
    bytes: int | None
    excluded: list[ExcludedRunPublic]
    error: str | None
    #: The last verification (every build ends with one): when, and every problem
    #: found (empty: checksums, descriptor and schema all good).
    verified_at: datetime | None
    problems: list[str] | None


class ReleaseFilePublic(BaseModel):
    """A file of a ready release: its path in the release, size and SHA-256."""

    path: str
    bytes: int
    sha256: str
