"""Agent configuration: a YAML file (``TESTBED_AGENT_CONFIG``, default
/etc/testbed/agent.yaml) plus the environment (``TESTBED_NODE_TOKEN``, and
``TESTBED_ORCHESTRATOR_URL`` to override the file's URL). Built once by ``main`` and
passed in; nothing is read at import time.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from node_agent.errors import ConfigError
from testbed_common import safeyaml
from testbed_common.platforms import UNKNOWN, oci_architecture
from testbed_common.wire import Operator, allowed_capabilities

DEFAULT_CONFIG_PATH = Path("/etc/testbed/agent.yaml")
#: The token is a secret: never in the YAML file that Ansible templates and people read.
TOKEN_ENV = "TESTBED_NODE_TOKEN"
CONFIG_ENV = "TESTBED_AGENT_CONFIG"
URL_ENV = "TESTBED_ORCHESTRATOR_URL"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModemMetadataConfig(_Strict):
    """Where an interface's modem metadata comes from: ``auto`` reads linkem's state
    file when it exists (the emulated fleet) and nothing otherwise; ``linkem`` requires
    it; ``mmcli`` asks ModemManager; ``none`` samples nothing."""

    source: Literal["auto", "linkem", "mmcli", "none"] = "auto"
    #: linkem state file; ``{interface}`` is replaced by the interface name.
    linkem_state: str = "/run/linkem/{interface}.json"
    #: ModemManager modem (index or D-Bus path); by default the one whose net port is
    #: the interface.
    mmcli_modem: str | None = None


class GpsConfig(_Strict):
    """Where the node's position comes from: ``gpsd`` (a real receiver) or ``linkem``
    (the emulated GPS of a moving node: the ``position`` in a linkem state file; the
    modems ride with the node, so any of its interfaces' files will do)."""

    source: Literal["gpsd", "linkem"] = "gpsd"
    #: linkem state file holding the position (source ``linkem``).
    linkem_state: str = "/run/linkem/op0.json"
    host: str = "127.0.0.1"
    port: int = Field(2947, gt=0, le=65535)
    timeout_s: float = Field(3.0, gt=0)


class InterfaceConfig(_Strict):
    """One modem interface of the node and the measurement server reached through it."""

    name: str = Field(min_length=1, examples=["op0"])
    operator: Operator
    rat: str | None = None
    #: Measurement server reachable through this interface (``$TESTBED_SERVER``).
    server_address: str
    #: Fixed address of the interface; read from the kernel when absent.
    address: str | None = None
    #: The modem's model as the inventory declares it (the fleet page shows it); what
    #: ModemManager reports replaces it once read.
    modem_model: str | None = Field(None, min_length=1, max_length=64)
    metadata: ModemMetadataConfig = ModemMetadataConfig()
    #: The measurement server's capture service (server-image/capture_service.py), for
    #: the server's side of every run's capture (server/capture/<iface>.pcap; see
    #: node_agent.server_capture). Give an address reached NOT through this SIM (the
    #: server's management address; the fleet's control network): the capture is
    #: fetched over it, which through the SIM would spend its data and cross the link
    #: being measured. Absent: no server-side capture. Uses ``capture``'s snap length
    #: and size cap, and is off when ``capture.enabled`` is false.
    server_capture_url: str | None = Field(None, pattern=r"^https?://")


class CaptureConfig(_Strict):
    """Packet capture of every run's interface (tcpdump; see testbed_kit.capture)."""

    enabled: bool = True
    #: Bytes kept of each packet: 96 is headers only (Ethernet + IP + TCP with options).
    snaplen: int = Field(96, gt=0, le=262144)
    #: Largest capture file, bytes: tcpdump is stopped once the file reaches it (the
    #: run goes on; meta/capture.json says truncated_at_max_bytes).
    max_bytes: int = Field(200_000_000, gt=0)


class RunLimitsConfig(_Strict):
    """One set of limits of a run (see :class:`RunPolicy`)."""

    #: Memory of the run's processes, MiB (its results and /tmp, tmpfs, come on top).
    memory_mb: int = Field(512, ge=16)
    #: CPU time, in cores (a fraction: a share of one).
    cpus: float = Field(1.0, gt=0)
    #: Processes and threads at once.
    pids: int = Field(256, ge=8)
    #: The results directory's bound: bytes (MiB) and files.
    results_mb: int = Field(256, ge=1)
    result_files: int = Field(10_000, ge=16)
    #: The run's /tmp, MiB.
    tmp_mb: int = Field(64, ge=1)


class RunPolicy(_Strict):
    """What this node grants one run (docs/security.md, "Run confinement"): a manifest's
    ``resources:`` asks, ``default`` fills what it does not ask, ``cap`` bounds both;
    ``capabilities``: those of the allowed list this node grants (a run that declares
    another is refused)."""

    default: RunLimitsConfig = RunLimitsConfig()
    #: Defaults for a node of 2 cores and 2 GB or more (an APU2): a run may take most
    #: of it, the agent and the engine keep the rest.
    cap: RunLimitsConfig = RunLimitsConfig(memory_mb=1024, cpus=2.0, pids=1024,
                                           results_mb=1024, result_files=100_000,
                                           tmp_mb=256)
    capabilities: tuple[str, ...] = ("NET_RAW", "NET_BIND_SERVICE")

    @field_validator("capabilities")
    @classmethod
    def _allowed(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        allowed_capabilities(value, hint=" (run_policy.capabilities)")
        return value
    #: Image of each run's holder container (it holds the run's namespace and volumes);
    #: None: the image of ``netns_container``, the node's own (the agent's) image.
    holder_image: str | None = None
    #: How often a running experiment's bounds are looked at (its results and /tmp,
    #: its processes), seconds: one exec and one stats call of the engine each time.
    check_interval_s: float = Field(2.0, gt=0)


class RunNetworkConfig(_Strict):
    """A run's network (node_agent.runnet; docs/security.md, "A run's network").
    ``shared``: the experiment joins the node's namespace and sees and reaches what the
    node does (the default until a node's set-up is known to carry confined runs);
    ``confined``: a namespace of the run's own with its booked SIMs only, a veth per
    SIM routed into that SIM's path; needs the agent in the node's network namespace
    (``counters_from: sysfs``), ip_forward on, and nft."""

    mode: Literal["shared", "confined"] = "shared"
    #: Destinations no run reaches (addresses or networks), beyond what is always
    #: denied: link-local 169.254.0.0/16, the node itself (but the metadata port), and
    #: the orchestrator's and capture services' addresses. Each interface's
    #: measurement server stays reachable inside a denied range. The emulated fleet
    #: denies its whole 172.30.0.0/16: the control network and the other nodes.
    denied: tuple[str, ...] = ()
    #: Where the engine's sandbox files (/var/run/docker/netns) are bind-mounted with
    #: rslave propagation, if they are: another handle on a run's namespace.
    netns_dir: Path | None = None
    #: How long the run's namespace may take to come up before the run fails, seconds
    #: (the holder's ``ip`` commands take tens of milliseconds).
    ready_timeout_s: float = Field(10.0, gt=0)


class AgentConfig(_Strict):
    node_id: str = Field(min_length=1)  # informational; the token identifies the node
    orchestrator_url: str = Field(pattern=r"^https?://")
    token: str = Field(min_length=1, repr=False)
    model: str = "unknown"
    #: The node's processor architecture in the OCI's names (amd64, arm64): the planner
    #: books on it only experiments whose image provides it. Read from the machine
    #: (``platform.machine()``, normalised: aarch64 -> arm64) unless the file says it.
    architecture: str = Field(default_factory=lambda: oci_architecture(platform.machine()))
    #: The node has the native tools (tools/: linkem, the ABw estimator) for its
    #: architecture. They are built for amd64 only (docs/deploying.md): an arm64 node
    #: says false, and the node's tag ``no-native-tools`` keeps the planner from booking
    #: experiments that need them on it.
    native_tools: bool = True
    #: Spool, outbox and run scratch; must survive restarts (a volume).
    state_dir: Path = Path("/var/lib/testbed-agent")
    #: Container whose network namespace experiments join (``--net=container:...``).
    netns_container: str
    interfaces: tuple[InterfaceConfig, ...] = Field(min_length=1)
    #: Where interface byte counters are read: ``sysfs`` when the agent shares the node's
    #: network namespace (/sys/class/net), ``netns_container`` to read
    #: /proc/<pid>/net/dev of that container (the agent then needs the host PID namespace).
    counters_from: Literal["sysfs", "netns_container"] = "sysfs"
    sysfs_net: Path = Path("/sys/class/net")
    #: Heartbeat period until the orchestrator's reply sets it, seconds (MONROE: 60 s).
    heartbeat_interval_s: float = Field(60.0, gt=0)
    #: Per-request HTTP timeout, seconds; a chunk of 1 MiB on a 1 Mbit/s 3G uplink is 8 s.
    request_timeout_s: float = Field(30.0, gt=0)
    #: Upload chunk size, bytes (the orchestrator accepts up to 16 MiB).
    chunk_bytes: int = Field(1024 * 1024, gt=0)
    #: How often running experiments' byte counters are read, seconds.
    meter_interval_s: float = Field(0.5, gt=0)
    #: Hold each run to its reservation in the kernel too (an nftables quota in the
    #: node's namespace; needs nft and NET_ADMIN). Without nft the meter alone does.
    quota_backstop: bool = True
    #: Kept free on the state disk in any case (results, logs, state reports): a run is
    #: refused (failed, with the reason) unless this much is free beyond its estimated
    #: captures and bundle (node_agent.diskspace). Spooled bundles are never deleted.
    min_free_disk_bytes: int = Field(200_000_000, ge=0)
    #: Longest pause between retries while the orchestrator is unreachable, seconds.
    max_backoff_s: float = Field(60.0, gt=0)
    #: Pause between registrations refused with 401 (a wrong token stays wrong), seconds.
    unauthorized_retry_s: float = Field(300.0, gt=0)
    #: What each run may have (capabilities, memory, CPU, processes, results, /tmp).
    run_policy: RunPolicy = RunPolicy()
    #: Modem (and GPS) metadata sampling period, seconds.
    metadata_interval_s: float = Field(5.0, gt=0)
    #: Loopback port of the live metadata server for experiments; 0 turns it off.
    metadata_port: int = Field(8765, ge=0, le=65535)
    #: GPS receiver, when the node has one.
    gps: GpsConfig | None = None
    #: tcpdump of the run's interface into results/capture/<iface>.pcap (and, with an
    #: interface's ``server_capture_url``, the server's into server/capture/).
    capture: CaptureConfig = CaptureConfig()
    #: What a run's network is: the node's (shared) or its own (confined).
    run_network: RunNetworkConfig = RunNetworkConfig()

    @model_validator(mode="after")
    def _confined_runs_need_the_node_namespace(self) -> AgentConfig:
        if self.run_network.mode == "confined" and self.counters_from != "sysfs":
            raise ValueError(
                "run_network.mode confined needs the agent in the node's network "
                "namespace (counters_from: sysfs): it routes each run's traffic there")
        return self

    @field_validator("architecture")
    @classmethod
    def _oci_architecture(cls, value: str) -> str:
        """``aarch64`` as ``uname -m`` says it is reported as ``arm64``; ``unknown``
        (an old config's placeholder) is read from the machine."""
        name = oci_architecture(value)
        return oci_architecture(platform.machine()) if name == UNKNOWN else name

    def interface(self, name: str) -> InterfaceConfig | None:
        return next((i for i in self.interfaces if i.name == name), None)


def load_config(env: Mapping[str, str] | None = None) -> AgentConfig:
    """Read the YAML file named by the environment and merge the environment into it."""
    env = os.environ if env is None else env
    path = Path(env.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)
    try:
        raw = safeyaml.load(path.read_bytes(), what=f"agent config {path}") or {}
    except OSError as e:
        raise ConfigError(f"cannot read agent config {path}: {e} (set {CONFIG_ENV})") from e
    except safeyaml.YamlRefused as e:
        raise ConfigError(str(e)) from e
    if not isinstance(raw, dict):
        raise ConfigError(f"agent config {path} must be a mapping")
    return parse_config(raw, env, source=str(path))


def parse_config(
    raw: Mapping[str, object], env: Mapping[str, str], *, source: str = "<config>"
) -> AgentConfig:
    data = dict(raw)
    if "token" in data:
        raise ConfigError(f"{source}: put the node token in {TOKEN_ENV}, not in the file")
    token = env.get(TOKEN_ENV, "")
    if not token:
        raise ConfigError(f"{TOKEN_ENV} is not set: the agent needs its node token")
    data["token"] = token
    if env.get(URL_ENV):
        data["orchestrator_url"] = env[URL_ENV]
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: invalid agent config:\n{e}") from e
