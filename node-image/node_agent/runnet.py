"""A run's network: what it sees, what it may reach, and how the node carries it.

Two implementations of one seam (:class:`RunNetwork`), asked for by the run's holder
container (the small container that owns the run's network namespace; the experiment
joins it with ``network_mode="container:<holder>"``):

- :class:`SharedNetwork`, today's: the holder joins the node's own namespace, so the
  experiment sees every interface of the node (the control network, every SIM) and
  reaches whatever the node reaches. Cooperation, not enforcement.
- :class:`ConfinedNetwork`, MONROE's design: the holder has a namespace of its own
  (``network_mode="none"``: loopback only), and each booked SIM comes in as one end of
  a veth pair named as the SIM (``op0`` ...) with a private address; the other end
  (``tbrun<i>``) stays in the node's namespace, where the node routes what comes from
  it into that SIM's path only (the route the node itself uses from the SIM's address
  to its measurement server: in the emulated fleet into linkem's uplink TUN device, on a
  real node out of the modem) with source NAT to the SIM's address, and the replies
  back through the emulated downlink to the run. An nftables table per run in the
  node's namespace holds the rest: a packet from a run's veth with any source address
  but the run's own is dropped before anything else sees it (no spoofing another SIM's
  or the node's address); it is forwarded only out of its SIM's path, never to the
  denied destinations (link-local 169.254.0.0/16, the control network, the
  orchestrator and capture service, whatever the node's configuration denies), and
  never delivered to the node itself except the live metadata port; nothing reaches
  the run that it did not ask for (conntrack's established replies only); IPv6 from or
  to it is dropped.

The node's interface counters and the kernel quota backstop keep counting the run:
its packets leave by the SIM's interface with the SIM's address, as the node's own
(:mod:`node_agent.backstop` charges the prerouting and postrouting hooks).

How the agent reaches the holder's namespace with the least privilege: it creates each
veth pair in its own (the node's) namespace with the run's end born in the holder's
(``ip link add tbrun0 type veth peer name op0 netns <handle>``), which needs only
CAP_NET_ADMIN and a handle on that namespace: ``/proc/<pid>/ns/net`` of the holder's
process. The agent runs in a container with a pid namespace of its own (the compose
fleet's node containers, the Ansible agent), where the engine's pid of the holder means
nothing; so the holder is started in the agent's container's pid namespace
(``pid_mode="container:<node>"``: :attr:`HolderNeeds.pid_mode`), and the agent finds its
process there by its command line (``testbed-holder <run id>``). The agent gains no
sight of the host's processes (no ``pid: host``); the holder sees the node's, and holds
nothing but NET_ADMIN in its own network namespace; the experiment, which joins only the
holder's network namespace, sees neither. Where the agent does share the engine's pid
namespace (tests, an agent on the host), the engine's pid is used as it is; where the
engine's netns folder is bind-mounted into the agent with ``rslave`` propagation
(``netns_dir``), the engine's sandbox file (``sandbox_key``) is the handle.
Configuring inside the run's namespace would need setns (CAP_SYS_ADMIN); instead the
holder configures itself: its command (:func:`holder_script`, ``ip`` and ``sh`` only)
waits for the veth ends to arrive, brings them up with their routes and, last, their
addresses, and it holds CAP_NET_ADMIN for that (the experiment container does not:
capabilities are a process's, not its namespace's). The agent knows the run's namespace
is ready when each run address answers a ping from the node.

Scripts and plans are pure functions; :class:`ConfinedNetwork` runs them with ``ip``
and ``nft``. docs/security.md ("A run's network") has the design's figures.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from node_agent.config import AgentConfig
from node_agent.errors import RunnerError

log = logging.getLogger(__name__)

#: The node-side end of each run veth: ``tbrun<i>``, i the SIM's place in the node's
#: configuration (kernel names are at most 15 characters; a real modem's may be long).
PEER_PREFIX = "tbrun"
#: Each SIM's /30 inside a run: 198.18.<i>.0/30, the node's end .1, the run's .2.
#: 198.18.0.0/15 is set aside for benchmarking networks (RFC 2544): no operator hands
#: it to a SIM, so it cannot shadow a destination the run measures.
RUN_NET = ipaddress.IPv4Network("198.18.0.0/15")
#: Routing table and rule preference of SIM i's run traffic: RUN_TABLE_BASE + i. The
#: emulated fleet's own rules are at 200 + i (deploy/emulation/node-links.sh).
RUN_TABLE_BASE = 7100
#: nftables tables: one per run, named ``testbed_run_<run>``; removed at detach, and
#: every one of them when the agent starts.
TABLE_PREFIX = "testbed_run_"
#: The holder's command line ends ``testbed-holder <run id>``: how the agent finds it.
HOLDER_MARK = "testbed-holder"
#: Per-namespace settings a run's namespace takes from the node's: a new namespace
#: starts from the kernel's defaults, and these shape what a run measures.
INHERITED_SYSCTLS = (
    "net.ipv4.tcp_no_metrics_save",   # short-flows: no cached ssthresh or RTT per flow
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling",
)
#: How long the agent looks for the holder's process after the engine started it, s.
HOLDER_LOOKUP_S = 3.0
#: Always denied to a run, whatever the configuration: link-local, where cloud
#: metadata services answer (169.254.169.254).
ALWAYS_DENIED = ("169.254.0.0/16",)


@dataclass(frozen=True)
class HolderNeeds:
    """What the run's network asks of the holder container."""

    #: "none" to confine; "container:<node>" = today's shared namespace.
    network_mode: str
    #: e.g. ("NET_ADMIN",) when the holder configures its own namespace.
    cap_add: tuple[str, ...] = ()
    #: None: the holder only sleeps (the holder's default).
    command: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    #: "container:<node>": the holder's process in the node's pid namespace, where the
    #: agent sees it (and its network namespace) without the host's pid namespace.
    #: None: the engine's default (a pid namespace of its own).
    pid_mode: str | None = None
    #: Per-namespace sysctls of the holder's namespace (the engine sets them; /proc/sys
    #: is read-only inside a container).
    sysctls: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunNetworkView:
    """What the experiment is told about its network (config.json and environment)."""

    #: Booked interface name -> its address inside the run's namespace.
    addresses: Mapping[str, str | None]
    #: The live metadata endpoint, reachable from inside the run's namespace.
    metadata_url: str | None


class RunNetwork(Protocol):
    def holder_needs(self, run_id: str, booked: Sequence[str]) -> HolderNeeds: ...

    def attach(self, run_id: str, *, holder_pid: int, sandbox_key: str | None,
               booked: Sequence[str]) -> RunNetworkView:
        """After the holder started, before the experiment is created."""
        ...

    def detach(self, run_id: str) -> None:
        """After the experiment ended; never raises."""
        ...


class SharedNetwork:
    """Today's network: the run shares the node's namespace (``netns_container``'s), and
    is told the node's own addresses of its interfaces (``address_of``: None when
    unknown) and the node's metadata URL."""

    def __init__(self, *, netns_container: str,
                 address_of: Callable[[str], str | None],
                 metadata_url: str | None = None) -> None:
        self.netns_container = netns_container
        self.address_of = address_of
        self.metadata_url = metadata_url

    def holder_needs(self, run_id: str, booked: Sequence[str]) -> HolderNeeds:
        return HolderNeeds(network_mode=f"container:{self.netns_container}")

    def attach(self, run_id: str, *, holder_pid: int, sandbox_key: str | None,
               booked: Sequence[str]) -> RunNetworkView:
        return RunNetworkView(addresses={name: self.address_of(name) for name in booked},
                              metadata_url=self.metadata_url)

    def detach(self, run_id: str) -> None:
        pass


# -- the plan (pure) ---------------------------------------------------------------


@dataclass(frozen=True)
class RunLink:
    """One booked SIM inside a run: its veth pair and addresses."""

    name: str           # the SIM's interface name, also the run's end of the veth
    index: int          # its place in the node's configuration
    peer: str           # the node's end, tbrun<index>
    run_address: str    # 198.18.<index>.2
    node_address: str   # 198.18.<index>.1: the run's gateway and metadata endpoint

    @property
    def table(self) -> int:
        return RUN_TABLE_BASE + self.index

    @property
    def node_mac(self) -> str:
        return f"02:74:62:00:{self.index:02x}:01"  # locally administered ("tb")

    @property
    def run_mac(self) -> str:
        return f"02:74:62:00:{self.index:02x}:02"


@dataclass(frozen=True)
class SimPath:
    """Where the node sends a SIM's traffic: the device (and gateway) of the route
    from the SIM's address to its measurement server, and that address (source NAT)."""

    device: str
    gateway: str | None
    address: str


def plan_links(booked: Sequence[str], configured: Sequence[str]) -> tuple[RunLink, ...]:
    """The veth pairs of a run booked on ``booked`` (pure); an interface the node does
    not configure is an error that names those it does."""
    if not booked:
        raise RunnerError("a run books at least one interface; none was given")
    if len(set(booked)) != len(booked):
        raise RunnerError(f"an interface is booked twice: {list(booked)}")
    links = []
    for name in booked:
        if name not in configured:
            raise RunnerError(f"interface {name} is not configured on this node "
                              f"({', '.join(configured)})")
        i = list(configured).index(name)
        if i > 255:
            raise RunnerError(f"interface {name}: more than 256 SIMs on one node")
        base = int(RUN_NET.network_address) + 256 * i
        links.append(RunLink(
            name=name, index=i, peer=f"{PEER_PREFIX}{i}",
            run_address=str(ipaddress.IPv4Address(base + 2)),
            node_address=str(ipaddress.IPv4Address(base + 1)),
        ))
    return tuple(links)


def holder_script(links: Sequence[RunLink]) -> str:
    """The holder's command (pure): wait for each veth end the agent creates in its
    namespace, bring it up with its routes, then its address (last: the address
    answering the agent's ping means the whole namespace is ready), then hold the
    namespace until stopped.

    The first booked interface carries the default route; each has a default route of
    its own (a higher metric: sockets bound to the device by name find it) and a rule
    ``from <its address> lookup <its table>``: a socket bound to an interface's address
    leaves by that interface, as multi-homed experiments expect."""
    lines = ["set -eu", "ip link set lo up"]
    for k, link in enumerate(links):
        n, gw = shlex.quote(link.name), link.node_address
        lines += [
            f"i=0; until ip link show {n} >/dev/null 2>&1; do i=$((i+1)); "
            f"[ $i -le 600 ] || {{ echo 'testbed-holder: no {link.name}' >&2; exit 1; }}; "
            "sleep 0.05; done",
            f"ip link set {n} up",
            f"ip route replace default via {gw} dev {n} onlink metric {100 + k}",
            f"ip route replace default via {gw} dev {n} onlink table {link.table}",
            f"ip rule add pref {link.table} from {link.run_address} lookup {link.table}",
            f"ip addr add {link.run_address}/30 dev {n}",
        ]
    lines += ["echo testbed-holder: ready",
              "trap 'exit 0' TERM INT", "while :; do sleep 3600 & wait $!; done"]
    return "\n".join(lines) + "\n"


def table_name(run_id: str) -> str:
    return TABLE_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", run_id)


def _q(name: str) -> str:
    return json.dumps(name)  # a quoted string nft accepts


def nft_script(run_id: str, links: Sequence[RunLink], paths: Mapping[str, SimPath], *,
               allowed: Mapping[str, Sequence[str]], denied: Sequence[str],
               metadata_port: int) -> str:
    """The run's nftables table in the node's namespace (pure; see the module's
    docstring). ``allowed``: per interface, destinations reached even inside a denied
    range (its measurement server); ``denied``: destinations no run reaches."""
    t = table_name(run_id)
    deny = ", ".join(dict.fromkeys([*ALWAYS_DENIED, *denied]))
    pre, fwd, inp, nat = [], [], [], []
    for link in links:
        peer, path = _q(link.peer), paths[link.name]
        pre += [f"iifname {peer} ip saddr != {link.run_address} drop",
                f"iifname {peer} meta nfproto != ipv4 drop"]
        fwd.append(f"iifname {peer} oifname != {_q(path.device)} drop")
        ok = ", ".join(allowed.get(link.name, ()))
        if ok:
            fwd.append(f"iifname {peer} ip daddr {{ {ok} }} accept")
        fwd += [f"iifname {peer} ip daddr {{ {deny} }} drop",
                f"iifname {peer} accept",
                f"oifname {peer} ct state established,related accept",
                f"oifname {peer} drop"]
        if metadata_port:
            inp.append(f"iifname {peer} ip daddr {link.node_address} "
                       f"tcp dport {metadata_port} accept")
        inp += [f"iifname {peer} ct state established,related accept",
                f"iifname {peer} drop"]
        nat.append(f"oifname {_q(path.device)} ip saddr {link.run_address} "
                   f"snat ip to {path.address}")

    def chain(name: str, spec: str, rules: list[str]) -> str:
        body = "".join(f"add rule inet {t} {name} {r}\n" for r in rules)
        return f"add chain inet {t} {name} {{ {spec}; policy accept; }}\n" + body

    return (
        f"add table inet {t}\n"
        # Before conntrack (-200): a spoofed packet leaves no trace in the node.
        + chain("run_pre", "type filter hook prerouting priority -300", pre)
        + chain("run_forward", "type filter hook forward priority 0", fwd)
        + chain("run_input", "type filter hook input priority 0", inp)
        + chain("run_nat", "type nat hook postrouting priority 100", nat)
    )


def holder_argv_matches(cmdline: bytes, run_id: str) -> bool:
    """``/proc/<pid>/cmdline`` is the holder's of ``run_id`` (pure): ``sh -c SCRIPT
    testbed-holder RUN``."""
    argv = cmdline.split(b"\0")
    return len(argv) >= 5 and argv[3:5] == [HOLDER_MARK.encode(), run_id.encode()]


def is_holder(proc: Path, pid: int, run_id: str) -> bool:
    try:
        return holder_argv_matches((proc / str(pid) / "cmdline").read_bytes(), run_id)
    except OSError:
        return False


def holder_pids(proc: Path, run_id: str) -> list[int]:
    """The pids of ``run_id``'s holder in the pid namespace ``proc`` shows."""
    pids = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and is_holder(proc, int(entry.name), run_id):
            pids.append(int(entry.name))
    return pids


def parse_route(text: str) -> tuple[str, str | None]:
    """``ip -j route get`` output as (device, gateway) (pure)."""
    try:
        route = json.loads(text)[0]
        return str(route["dev"]), (str(route["gateway"]) if route.get("gateway") else None)
    except (ValueError, LookupError, TypeError) as e:
        raise RunnerError(f"unreadable route: {e}: {text[:200]!r}") from e


# -- the node side (I/O) -------------------------------------------------------------


class Closeable(Protocol):
    def close(self) -> None: ...


#: Starts the live metadata endpoint on one more address of the node's namespace.
MetadataListen = Callable[[str], Closeable]


@dataclass(frozen=True)
class SimRoute:
    """What the node knows of one SIM: its address (None: read from the kernel) and
    the measurement server whose route is the SIM's path; ``allowed``: destinations the
    run reaches even inside a denied range (the server)."""

    name: str
    server_address: str
    address: str | None = None
    allowed: tuple[str, ...] = ()


class ConfinedNetwork:
    """:class:`RunNetwork` with a namespace of the run's own (see the module's
    docstring). ``sims``: the node's interfaces, in its configuration's order;
    ``denied``: destinations (addresses or networks) no run reaches, on top of
    link-local; ``metadata_port`` and ``metadata_listen``: the live metadata endpoint,
    served on each run's gateway address; ``netns_dir``: where the engine's sandbox
    files are visible to the agent (used when the holder's pid is not);
    ``node_netns``: run ``ip``/``nft`` and the readiness probe in that namespace (a path to a
    namespace file) rather than the agent's own (tests, tools); ``pid_container``: the
    container whose pid namespace the holder joins (the agent's own; None: the holder's
    pid as the engine gives it is one the agent sees)."""

    def __init__(self, sims: Sequence[SimRoute], *, denied: Sequence[str] = (),
                 metadata_port: int = 0, metadata_listen: MetadataListen | None = None,
                 netns_dir: Path | None = None, node_netns: str | None = None,
                 ready_timeout_s: float = 10.0, command_timeout_s: float = 10.0,
                 address_of: Callable[[str], str | None] | None = None,
                 pid_container: str | None = None, proc: Path = Path("/proc")) -> None:
        for d in denied:
            try:
                ipaddress.ip_network(d, strict=False)
            except ValueError as e:
                raise RunnerError(f"denied destination {d!r} is not an address or a "
                                  f"network (e.g. 172.30.0.0/24): {e}") from e
        self.sims = {s.name: s for s in sims}
        self.order = [s.name for s in sims]
        self.denied = tuple(denied)
        self.metadata_port = metadata_port
        self.metadata_listen = metadata_listen
        self.netns_dir = netns_dir
        self.node_netns = node_netns
        self.ready_timeout_s = ready_timeout_s
        self.command_timeout_s = command_timeout_s
        self.address_of = address_of
        self.pid_container = pid_container
        self.proc = proc
        self._sysctls: dict[str, str] | None = None
        self._attached: dict[str, tuple[tuple[RunLink, ...], list[Closeable]]] = {}

    # the seam ----------------------------------------------------------------------

    def holder_needs(self, run_id: str, booked: Sequence[str]) -> HolderNeeds:
        links = plan_links(booked, self.order)
        return HolderNeeds(
            network_mode="none", cap_add=("NET_ADMIN",),
            command=("sh", "-c", holder_script(links), HOLDER_MARK, run_id),
            pid_mode=f"container:{self.pid_container}" if self.pid_container else None,
            sysctls=self._node_sysctls())

    def _node_sysctls(self) -> dict[str, str]:
        """The node's values of :data:`INHERITED_SYSCTLS`, read once: a run measures
        with the TCP the node was set up with (the fleet's tcp_no_metrics_save)."""
        if self._sysctls is None:
            found = {}
            for key in INHERITED_SYSCTLS:
                path = "/proc/sys/" + key.replace(".", "/")
                proc = self._command(["cat", path], check=False)
                if proc.returncode == 0 and proc.stdout.strip():
                    found[key] = proc.stdout.strip()
            self._sysctls = found
        return dict(self._sysctls)

    def attach(self, run_id: str, *, holder_pid: int, sandbox_key: str | None,
               booked: Sequence[str]) -> RunNetworkView:
        links = plan_links(booked, self.order)
        handle = self._handle(run_id, holder_pid, sandbox_key)
        listeners: list[Closeable] = []
        self._attached[run_id] = (links, listeners)
        try:
            paths = {link.name: self._path(link.name) for link in links}
            for link in links:
                self._ip("link", "del", link.peer, check=False)
                self._ip("link", "add", link.peer, "address", link.node_mac, "type", "veth",
                         "peer", "name", link.name, "address", link.run_mac, "netns", handle)
                self._ip("addr", "add", f"{link.node_address}/30", "dev", link.peer)
                # The run's end is known: no ARP round (whose retries are a second
                # apart) between the holder's readiness and the agent seeing it.
                self._ip("neigh", "replace", link.run_address, "lladdr", link.run_mac,
                         "dev", link.peer, "nud", "permanent")
                self._ip("link", "set", link.peer, "up")
                path = paths[link.name]
                via = ["via", path.gateway] if path.gateway else []
                self._ip("route", "replace", "default", *via, "dev", path.device,
                         "table", str(link.table))
                self._ip("rule", "del", "pref", str(link.table), check=False)
                self._ip("rule", "add", "pref", str(link.table), "iif", link.peer,
                         "lookup", str(link.table))
            self._nft(["-f", "-"], nft_script(
                run_id, links, paths, denied=self.denied, metadata_port=self.metadata_port,
                allowed={n: (s.server_address, *s.allowed) for n, s in self.sims.items()}))
            if self.metadata_port and self.metadata_listen is not None:
                for link in links:
                    listeners.append(self.metadata_listen(link.node_address))
            self._await_ready(links)
        except RunnerError:
            self.detach(run_id)
            raise
        except Exception as e:  # an unexpected failure still leaves nothing behind
            self.detach(run_id)
            raise RunnerError(f"cannot confine the run's network: {e}") from e
        return RunNetworkView(
            addresses={link.name: link.run_address for link in links},
            metadata_url=(f"http://{links[0].node_address}:{self.metadata_port}"
                          if self.metadata_port else None),
        )

    def detach(self, run_id: str) -> None:
        links, listeners = self._attached.pop(run_id, ((), []))
        for listener in listeners:
            try:
                listener.close()
            except Exception as e:  # never raises: the run is over whatever happens
                log.warning("run %s: cannot stop its metadata listener: %s", run_id, e)
        try:
            self._nft(["delete", "table", "inet", table_name(run_id)])
        except RunnerError as e:
            if links and "No such file" not in str(e):
                log.warning("run %s: cannot remove its nftables table: %s", run_id, e)
        for link in links:
            for args in (("link", "del", link.peer),
                         ("rule", "del", "pref", str(link.table)),
                         ("route", "flush", "table", str(link.table))):
                try:
                    self._ip(*args, check=False)
                except RunnerError as e:
                    log.warning("run %s: %s", run_id, e)

    def clear(self) -> None:
        """Remove what an earlier agent life left: run tables, veths, rules, routes."""
        try:
            listing = json.loads(self._nft(["-j", "list", "tables", "inet"]) or "{}")
            for item in listing.get("nftables", []):
                name = item.get("table", {}).get("name", "")
                if name.startswith(TABLE_PREFIX):
                    self._nft(["delete", "table", "inet", name])
        except (RunnerError, ValueError, AttributeError) as e:
            log.warning("cannot clear the run tables of an earlier life: %s", e)
        for i in range(len(self.order)):
            for args in (("link", "del", f"{PEER_PREFIX}{i}"),
                         ("rule", "del", "pref", str(RUN_TABLE_BASE + i)),
                         ("route", "flush", "table", str(RUN_TABLE_BASE + i))):
                try:
                    self._ip(*args, check=False)
                except RunnerError as e:
                    log.warning("%s", e)

    # helpers -----------------------------------------------------------------------

    def _handle(self, run_id: str, holder_pid: int, sandbox_key: str | None) -> str:
        """A path to the holder's namespace that the agent can open: the holder's
        process as the agent sees it, else the engine's sandbox file."""
        tried = []
        # The engine answers once the holder is started, which can be a moment before
        # its process has become the holder's command (the runtime's init still
        # execs it): look again for a while.
        deadline = time.monotonic() + min(self.ready_timeout_s, HOLDER_LOOKUP_S)
        while True:
            for pid in [holder_pid, *holder_pids(self.proc, run_id)]:
                if pid > 0 and is_holder(self.proc, pid, run_id):
                    return str(self.proc / str(pid) / "ns" / "net")
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        tried.append(f"no process {HOLDER_MARK} {run_id} in {self.proc}")
        if sandbox_key:
            key = Path(sandbox_key)
            path = self.netns_dir / key.name if self.netns_dir is not None else key
            if path.exists():
                return str(path)
            tried.append(f"no {path}")
        raise RunnerError(
            f"cannot reach the run's network namespace ({'; '.join(tried)}): start the "
            "holder in the agent's pid namespace (pid_mode container:<agent's container>), "
            "or bind-mount the engine's netns folder into the agent with rslave "
            "propagation and set run_network.netns_dir")

    def _path(self, name: str) -> SimPath:
        sim = self.sims[name]
        address = sim.address or (self.address_of(name) if self.address_of else None)
        if not address:
            raise RunnerError(f"interface {name} has no IPv4 address: a confined run "
                              "needs it (source NAT); is the modem connected?")
        device, gateway = parse_route(self._ip("-j", "route", "get", sim.server_address,
                                               "from", address))
        return SimPath(device=device, gateway=gateway, address=address)

    def _await_ready(self, links: Sequence[RunLink]) -> None:
        addresses = [link.run_address for link in links]
        if self.node_netns is None:
            late = await_addresses(addresses, timeout_s=self.ready_timeout_s)
        else:  # the probe's socket must be in the node's namespace: a process there
            proc = self._command(
                [sys.executable, "-m", "node_agent.runnet", "await",
                 str(self.ready_timeout_s), *addresses],
                check=False, timeout_s=self.ready_timeout_s + 10)
            late = proc.stdout.split() if proc.returncode else []
        if late:
            raise RunnerError(
                f"the run's namespace did not come up within {self.ready_timeout_s:g} s "
                f"({', '.join(late)} did not answer; the holder's log says why)")

    def _command(self, cmd: list[str], *, stdin: str | None = None, check: bool = True,
                 timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
        if self.node_netns is not None:
            cmd = ["nsenter", f"--net={self.node_netns}", *cmd]
        try:
            proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                                  timeout=timeout_s or self.command_timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RunnerError(f"cannot run {' '.join(cmd[:4])}: {e}") from e
        if check and proc.returncode != 0:
            raise RunnerError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-300:]}")
        return proc

    def _ip(self, *args: str, check: bool = True) -> str:
        return self._command(["ip", *args], check=check).stdout

    def _nft(self, args: list[str], script: str | None = None) -> str:
        return self._command(["nft", *args], stdin=script).stdout


#: The port the readiness probe connects to: the discard service, which no run
#: namespace serves while it is being set up (nothing runs in it but the holder).
PROBE_PORT = 9


def await_addresses(addresses: Sequence[str], *, timeout_s: float) -> list[str]:
    """Wait until each address refuses a TCP connection (its namespace has it and
    answers), at most ``timeout_s`` in all; returns those that never did."""
    deadline = time.monotonic() + timeout_s
    waiting = list(addresses)
    while waiting and time.monotonic() < deadline:
        address = waiting[0]
        try:
            with socket.create_connection((address, PROBE_PORT), timeout=0.1):
                pass  # something listens there: it answers, so it is up
            waiting.pop(0)
        except ConnectionRefusedError:
            waiting.pop(0)
        except OSError:
            time.sleep(0.02)
    return waiting


def main(argv: Sequence[str]) -> int:
    """``python -m node_agent.runnet await TIMEOUT_S ADDRESS...``: the readiness probe
    run inside another namespace (``nsenter``); prints the addresses that never
    answered, exit code 1 if any."""
    if len(argv) < 3 or argv[0] != "await":
        print("usage: python -m node_agent.runnet await TIMEOUT_S ADDRESS...",
              file=sys.stderr)
        return 2
    late = await_addresses(argv[2:], timeout_s=float(argv[1]))
    print(" ".join(late))
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def denied_hosts(urls: Sequence[str | None]) -> list[str]:
    """The addresses of the hosts in ``urls`` (the orchestrator, capture services),
    which no run reaches; a name that does not resolve now is skipped with a warning
    (the configured denied ranges still hold)."""
    out: list[str] = []
    for url in urls:
        host = urlsplit(url).hostname if url else None
        if not host:
            continue
        try:
            infos = socket.getaddrinfo(host, None, family=socket.AF_INET)
        except OSError as e:
            log.warning("cannot resolve %s to deny it to runs: %s", host, e)
            continue
        out += [str(info[4][0]) for info in infos if str(info[4][0]) not in out]
    return out


def confined_from_config(config: AgentConfig, *, metadata_listen: MetadataListen | None,
                         address_of: Callable[[str], str | None]) -> ConfinedNetwork:
    """The node's :class:`ConfinedNetwork` from its agent configuration."""
    net = config.run_network
    hosts = denied_hosts([config.orchestrator_url,
                          *(i.server_capture_url for i in config.interfaces)])
    return ConfinedNetwork(
        [SimRoute(i.name, i.server_address, i.address) for i in config.interfaces],
        denied=[*net.denied, *hosts], metadata_port=config.metadata_port,
        metadata_listen=metadata_listen, netns_dir=net.netns_dir,
        ready_timeout_s=net.ready_timeout_s, address_of=address_of,
        pid_container=config.netns_container)
