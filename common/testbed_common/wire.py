"""Messages between node agents and the orchestrator (JSON over HTTPS, agent-initiated).

Nodes sit behind operator NAT, so every exchange starts at the agent: it registers,
heartbeats, and receives its assignments in the heartbeat reply (MONROE nodes pulled on
a 60 s heartbeat and prefetched a few tasks; we do the same). Field units are in the names.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from testbed_common.bounds import (
    ByteCount,
    Count,
    IdList,
    Instant,
    InterfaceStr,
    Label8,
    Label32,
    Label64,
    PositiveByteCount,
    Reason,
    Seconds,
    unique_by,
)
from testbed_common.states import RunState

API_PREFIX = "/api/v1"
AGENT_PREFIX = f"{API_PREFIX}/agent"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Operator(_Wire):
    mcc_mnc: str = Field(pattern=r"^[0-9]{3}-[0-9]{2,3}$", examples=["240-01"])
    name: Label64


class InterfaceReport(_Wire):
    """One modem interface as the agent sees it."""

    name: InterfaceStr = Field(examples=["op0"])
    operator: Operator
    rat: Label8 | None = None
    address: Label64 | None = None
    rx_bytes: ByteCount = 0
    tx_bytes: ByteCount = 0
    up: bool = True
    #: The modem behind the interface ("Quectel EM12-G"): as ModemManager names it on a
    #: real node, else as the node's inventory declares it.
    modem_model: Label64 | None = None


#: A node's interfaces, each reported once (two reports of one interface contradict).
Interfaces = Annotated[
    list[InterfaceReport],
    Field(max_length=64),
    AfterValidator(unique_by(lambda i: i.name, "interface")),
]


class Registration(_Wire):
    agent_version: Label32
    model: Label64 = "unknown"
    #: The node's processor architecture, in the OCI's names (amd64, arm64; see
    #: testbed_common.platforms). An agent that does not send it is taken as amd64.
    architecture: Label32 = "unknown"
    interfaces: Interfaces
    #: False on a node without the native tools (tools/) for its architecture: the
    #: orchestrator tags it ``no-native-tools`` and books there only experiments that
    #: need none. Older agents do not send it: they had the tools.
    native_tools: bool = True


class RegistrationReply(_Wire):
    node_id: str
    heartbeat_interval_s: float
    #: Runs the orchestrator believes this node holds. An agent that restarted and does
    #: not hold them reports them failed, so nothing waits for a run no one is running.
    active_run_ids: list[str]


class LiveMetadata(_Wire):
    """The node's latest metadata samples, each in the record format of the run
    bundle's ``meta/modem.jsonl``, ``meta/gps.jsonl`` and ``meta/system.jsonl``, so the
    orchestrator turns both into points with the same code."""

    modems: list[dict[str, Any]] = Field(default_factory=list, max_length=64)
    gps: dict[str, Any] | None = None
    system: dict[str, Any] | None = None
    #: Sources that cannot be read now, and why (``{"gps": "cannot reach gpsd at
    #: 127.0.0.1:2947: ..."}``, ``{"modem wwan0": "ModemManager is not installed ..."}``):
    #: a node without gpsd or ModemManager says so rather than going quiet. Sent with
    #: every heartbeat that carries metadata; empty when every source reads.
    unavailable: dict[Label32, Reason] = Field(default_factory=dict, max_length=65)


class Heartbeat(_Wire):
    sent_at: Instant
    interfaces: Interfaces
    #: Agent clock minus orchestrator clock, seconds, estimated from the last exchange.
    clock_offset_s: Seconds | None = None
    disk_free_bytes: ByteCount
    #: Duplicates are merged.
    running_run_ids: IdList = []
    spooled_bundles: Count = 0
    #: Latest modem, GPS and system samples: the time-series store follows the node
    #: between runs too (runs also carry their own samples in their bundles).
    metadata: LiveMetadata | None = None
    #: Runs the node holds in its book, handed out and not started yet: the reply's
    #: ``cancel_run_ids`` names those cancelled or ended meanwhile (e.g. while the node
    #: was offline), and the node drops them.
    pending_run_ids: IdList = []
    #: Runs the node dropped from its book without starting them (on a
    #: ``cancel_run_ids`` order, or missed): a cancelled run's reservation is held until
    #: its node says so (or its bundle arrives), since a node out of contact may run it
    #: before it learns of the cancel. Ids of runs not cancelled are ignored.
    #: The node reports each until a heartbeat carrying it is answered.
    dropped_run_ids: IdList = []


#: Capabilities a manifest may ask for its runs (every other one is dropped): raw
#: sockets for ping, traceroute and raw-socket probes; ports below 1024. Anything else
#: (NET_ADMIN, SYS_ADMIN, ...) would let a run reach past its confinement.
ALLOWED_CAPABILITIES = frozenset({"NET_RAW", "NET_BIND_SERVICE"})


class RunResources(_Wire):
    """What an experiment asks of the node for one run (its manifest's ``resources:``);
    the node caps each by its own policy. None: the node's default."""

    memory_mb: int | None = Field(None, ge=16, le=1_048_576)
    cpus: float | None = Field(None, gt=0, le=1024)
    pids: int | None = Field(None, ge=8, le=1_000_000)
    #: The results directory's bound: its bytes and its files (inodes).
    results_mb: int | None = Field(None, ge=1, le=1_048_576)
    result_files: int | None = Field(None, ge=16, le=100_000_000)
    #: The size of the run's /tmp (a tmpfs: it counts against the node's memory).
    tmp_mb: int | None = Field(None, ge=1, le=1_048_576)


def allowed_capabilities(value: Iterable[str], *, hint: str = "") -> list[str]:
    """``value`` sorted and without repeats, or a ValueError naming what is not on the
    allowed list (the one check of the manifest, the assignment and the node's policy);
    ``hint``: where the reader learns more."""
    refused = sorted(set(value) - ALLOWED_CAPABILITIES)
    if refused:
        raise ValueError(f"{refused} cannot be granted to a run: not allowed; every "
                         f"capability is dropped but those of {sorted(ALLOWED_CAPABILITIES)}"
                         f" that are declared{hint}")
    return sorted(set(value))


class Assignment(_Wire):
    """A run the node must execute. ``not_before``/``deadline`` bound its time slot."""

    run_id: str
    experiment: str
    image: str
    parameters: dict[str, Any]
    interface: str
    not_before: datetime
    deadline: datetime
    #: Data-volume reservation for the run (bytes, both directions on its interface).
    max_bytes: int
    #: What the experiment's manifest asks for (the node caps it by its policy).
    resources: RunResources = RunResources()
    #: Capabilities the manifest declares (from ALLOWED_CAPABILITIES); every other one
    #: is dropped.
    capabilities: Annotated[list[str], AfterValidator(allowed_capabilities)] = []


class HeartbeatReply(_Wire):
    server_time: datetime
    heartbeat_interval_s: float
    assignments: list[Assignment]
    #: Runs the node must stop now, or drop from its book (cancelled by a user, or
    #: already final here).
    cancel_run_ids: list[str] = []
    #: Per interface, the bytes the node may still move on that SIM this period: the
    #: usable cap less what was charged and less the reservations of runs not handed to
    #: the node. The node keeps a local account from it while offline and refuses a run
    #: whose reservation exceeds what is left after the bytes it measured since.
    #: Absent for a SIM with no cap (nothing to enforce).
    sim_left_bytes: dict[str, int] = {}


class StateReport(_Wire):
    state: RunState
    reason: Reason
    at: Instant
    #: Bytes the run moved on its interface (both directions), sent with the report
    #: that ends the run's traffic (uploading, failed, cancelled); the orchestrator
    #: settles the run's quota reservation with it. None: not measured (older agents).
    measured_bytes: ByteCount | None = None


class UploadCreate(_Wire):
    size: PositiveByteCount
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class UploadStatus(_Wire):
    """Where a resumable upload stands: the agent sends bytes from ``offset`` on."""

    run_id: str
    size: int
    sha256: str
    offset: int
    complete: bool


class UploadFault(StrEnum):
    """Why the last byte of an upload did not complete it; sent as ``fault`` beside
    ``detail`` in the 422 body (``{"detail": "...", "fault": "corrupted"}``), so the
    agent decides on meaning, not on wording. A 422 without it is refused as sent."""

    #: The bytes held hash to something else than declared (damaged in transit). The
    #: orchestrator has dropped them: send the whole bundle again from offset 0.
    CORRUPTED = "corrupted"
    #: Inspection refused the bundle itself (path traversal, links, a bomb, a manifest
    #: that names another run): sending the same bytes again can never succeed.
    REFUSED = "refused"


UPLOAD_OFFSET_HEADER = "Upload-Offset"
