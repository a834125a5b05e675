"""The kernel's hard limit on a run's traffic: an nftables quota, the backstop to the
agent's meter.

The meter (:mod:`node_agent.limits`) reads the interface counters every 0.5 s and kills
the experiment once it passes its reservation, so a fast link can overshoot by half a
second of traffic, and a stalled agent by more. The backstop closes that gap in the
kernel: a named quota of the reservation's size, charged by every packet from and to
the run's interface address in the node's network namespace, drops every packet once
it is spent. The meter still ends the run (it sees the quota spent and says so).

Rules match the interface *address*, so that they hold on a real modem (packets leave
on ``wwan0``) and in the emulated fleet alike (packets from the run's address leave
through linkem's TUN device before they reach ``opN``), and they sit on the prerouting
and postrouting hooks, which see every packet of the address, the node's own and those
it forwards: a confined run (:mod:`node_agent.runnet`) has a namespace of its own, and
its packets cross the node's namespace as forwarded traffic, which the input and output
hooks never see. Uplink packets are charged after source NAT (priority 300, past
``srcnat``), where a confined run's packets carry the SIM's address, and only as they
leave by the SIM's interface: in the emulated fleet they cross the node twice (into
linkem's TUN device, then out of ``opN``), and only the second is the operator's.
Downlink packets are charged before destination NAT (priority -150, past conntrack,
before ``dstnat``), while they still carry the SIM's address. Without an address the
rules match the interface name. The quota counts IP bytes (no link-layer
header), so on an Ethernet-like interface the counters can read up to 14 bytes per
packet more than the quota allowed: the SIM cap's safety margin covers that. It also
covers what no node can refuse: on a downlink, the packets the sender had already put
on the link when the quota started dropping still arrive and are charged (the
operator counts them before its radio queue, as the emulated fleet's counters do
before linkem's), at most the link's queue and a round trip of data. Stopping earlier
by a guess of that amount was tried and dropped: an experiment that moves its bounded
volume in bursts at line rate (short-flows, goodput-sequence) looks, a second before
its end, like a run about to pass its reservation.

The quota charges packets at the IP hooks, before the interface's queue: where that
queue drops what it cannot hold, the sender's second pass is charged again, and the
kernel's count runs ahead of what left (:func:`drifted`). At each meter tick the run's
session compares the two, and when the kernel is ahead by more than a read apart
explains it replaces the quota by one that has counted what the interface moved
(:func:`rearm_script`, one transaction). The reservation stays the limit; what it is
held against is the interface's count, as the operator's.

Scripts are built by pure functions; :class:`NftBackstop` runs them with ``nft -f -``,
through ``nsenter`` when the agent is outside the node's namespace.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: One table for every run's quota; removed whole when the agent starts.
TABLE = "testbed_backstop"
#: Uplink: after source NAT (``srcnat`` is 100), where a confined run's packets carry
#: the SIM's address. Downlink: after conntrack (-200), before destination NAT (``dstnat``
#: is -100) gives a confined run's replies their inner address back.
OUT_PRIORITY = 300
IN_PRIORITY = -150


class BackstopError(Exception):
    """nft is missing, refused a script, or answered something unreadable."""


def _ident(run_id: str) -> str:
    """nft identifiers allow letters, digits and underscores."""
    return re.sub(r"[^A-Za-z0-9_]", "_", run_id)


def quota_name(run_id: str) -> str:
    return "run_" + _ident(run_id)


def _quota_lines(run_id: str, *, interface: str, address: str | None, limit_bytes: int,
                 used_bytes: int) -> tuple[str, str]:
    """The quota's definition, and the two rules that charge it (pure)."""
    if limit_bytes < 0 or used_bytes < 0:
        raise ValueError(f"a quota cannot be negative ({limit_bytes}, {used_bytes} used)")
    name = json.dumps(interface)  # a quoted string nft accepts
    if address is not None:
        family = "ip6" if ":" in address else "ip"
        out_match = f"oifname {name} {family} saddr {address}"
        in_match = f"{family} daddr {address}"
    else:
        out_match, in_match = f"oifname {name}", f"iifname {name}"
    q, ident = quota_name(run_id), _ident(run_id)
    used = f" used {used_bytes} bytes" if used_bytes else ""
    return (
        f"add quota inet {TABLE} {q} {{ over {limit_bytes} bytes{used}; }}\n",
        f'add rule inet {TABLE} out_{ident} {out_match} quota name "{q}" drop\n'
        f'add rule inet {TABLE} in_{ident} {in_match} quota name "{q}" drop\n',
    )


def arm_script(run_id: str, *, interface: str, address: str | None, limit_bytes: int) -> str:
    """An ``nft -f`` script that limits the run to ``limit_bytes`` both ways (pure)."""
    quota, rules = _quota_lines(run_id, interface=interface, address=address,
                                limit_bytes=limit_bytes, used_bytes=0)
    ident = _ident(run_id)
    return (
        f"add table inet {TABLE}\n"
        + quota
        + f"add chain inet {TABLE} out_{ident} "
        f"{{ type filter hook postrouting priority {OUT_PRIORITY}; policy accept; }}\n"
        f"add chain inet {TABLE} in_{ident} "
        f"{{ type filter hook prerouting priority {IN_PRIORITY}; policy accept; }}\n"
        + rules
    )


def rearm_script(run_id: str, *, interface: str, address: str | None, limit_bytes: int,
                 used_bytes: int) -> str:
    """An ``nft -f`` script that replaces the run's quota by one of the same name and
    limit that has counted ``used_bytes`` (pure). One transaction: the chains are
    emptied, the quota replaced, the rules put back; no packet passes uncounted."""
    quota, rules = _quota_lines(run_id, interface=interface, address=address,
                                limit_bytes=limit_bytes, used_bytes=used_bytes)
    ident = _ident(run_id)
    return (
        f"flush chain inet {TABLE} out_{ident}\n"
        f"flush chain inet {TABLE} in_{ident}\n"
        f"delete quota inet {TABLE} {quota_name(run_id)}\n"
        + quota + rules
    )


#: How far the kernel's count may run ahead of the interface's (both since the run
#: started) before it is taken for packets that never left: the larger of these. The
#: two are read a moment apart, and the counters include link-layer headers the quota
#: does not; a count ahead by more is no reading gap.
DRIFT_SLACK_BYTES = 256 * 1024
DRIFT_SLACK_SHARE = 0.05


def drifted(kernel_bytes: int, interface_bytes: int, limit_bytes: int) -> bool:
    """The kernel quota has counted more than the interface moved, by more than a read
    apart explains, while the interface is still that far under the limit (pure).

    The quota charges packets at the IP postrouting hook, before the interface's queue;
    where that queue is small (a shaping qdisc such as tbf, a modem's short buffer) and
    drops what it cannot hold, the sender puts the same packets through the hook again,
    and each pass is charged: the Ansible rig's tbf link counted 17 MB against 3 MB that
    left the interface. The interface counters count what left, as the operator does.
    Near the limit the two cannot be told apart from a quota rightly spent (whose count
    goes on with the packets it drops, while the counters carry link-layer headers):
    there the kernel's count stands."""
    slack = max(DRIFT_SLACK_BYTES, DRIFT_SLACK_SHARE * limit_bytes)
    return kernel_bytes - interface_bytes > slack and interface_bytes + slack < limit_bytes


def disarm_script(run_id: str) -> str:
    """Removes what :func:`arm_script` added (pure): chains first, they use the quota."""
    ident = _ident(run_id)
    return (
        f"delete chain inet {TABLE} out_{ident}\n"
        f"delete chain inet {TABLE} in_{ident}\n"
        f"delete quota inet {TABLE} {quota_name(run_id)}\n"
    )


@dataclass(frozen=True)
class QuotaState:
    limit_bytes: int
    used_bytes: int

    @property
    def spent(self) -> bool:
        return self.used_bytes >= self.limit_bytes


def parse_quota(text: str) -> QuotaState:
    """``nft -j list quota ...`` output as a :class:`QuotaState` (pure)."""
    try:
        doc = json.loads(text)
        for item in doc["nftables"]:
            if "quota" in item:
                q = item["quota"]
                return QuotaState(limit_bytes=int(q["bytes"]), used_bytes=int(q.get("used", 0)))
    except (ValueError, KeyError, TypeError) as e:
        raise BackstopError(f"unreadable nft quota listing: {e}: {text[:200]!r}") from e
    raise BackstopError(f"nft listed no quota: {text[:200]!r}")


class NftBackstop:
    """Arms, reads and removes run quotas with the ``nft`` command."""

    def __init__(self, *, nft: str = "nft", netns_pid: Callable[[], int] | None = None,
                 timeout_s: float = 5.0) -> None:
        self.nft = nft
        self.netns_pid = netns_pid
        self.timeout_s = timeout_s
        #: The namespace holder's pid per armed run, looked up once at arming: the
        #: meter reads the quota every half second and the holder does not change.
        self._pids: dict[str, int | None] = {}

    def _pid(self) -> int | None:
        if self.netns_pid is None:
            return None
        try:
            return self.netns_pid()
        except Exception as e:  # the namespace holder is gone, or the engine is
            raise BackstopError(f"cannot find the node's network namespace: {e}") from e

    def _run(self, args: list[str], script: str | None = None, *,
             pid: int | None = None) -> str:
        cmd = [self.nft, *args]
        if pid is not None:
            cmd = ["nsenter", f"--net=/proc/{pid}/ns/net", *cmd]
        try:
            proc = subprocess.run(cmd, input=script, capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BackstopError(f"cannot run {cmd[0]}: {e}") from e
        if proc.returncode != 0:
            raise BackstopError(
                f"{' '.join(args[:2])} failed ({proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-300:]}"
            )
        return proc.stdout

    def arm(self, run_id: str, *, interface: str, address: str | None,
            limit_bytes: int) -> None:
        pid = self._pid()
        self._run(["-f", "-"], arm_script(run_id, interface=interface, address=address,
                                          limit_bytes=limit_bytes), pid=pid)
        self._pids[run_id] = pid

    def rearm(self, run_id: str, *, interface: str, address: str | None, limit_bytes: int,
              used_bytes: int) -> None:
        """The run's quota, replaced by one that has counted ``used_bytes``."""
        self._run(["-f", "-"], rearm_script(run_id, interface=interface, address=address,
                                            limit_bytes=limit_bytes, used_bytes=used_bytes),
                  pid=self._pids.get(run_id))

    def state(self, run_id: str) -> QuotaState:
        return parse_quota(self._run(["-j", "list", "quota", "inet", TABLE,
                                      quota_name(run_id)], pid=self._pids.get(run_id)))

    def disarm(self, run_id: str) -> None:
        self._run(["-f", "-"], disarm_script(run_id), pid=self._pids.pop(run_id, None))

    def clear(self) -> None:
        """Drops the quotas of an earlier agent life (their runs are gone)."""
        try:
            self._run(["delete", "table", "inet", TABLE], pid=self._pid())
        except BackstopError as e:
            if "No such file" not in str(e):
                raise
