"""The run's network, as the run's containers see it: one seam between the run's
containers (the holder and the experiment, :mod:`node_agent.engine`) and what gives the
run its network namespace.

Each run is two containers, as a Kubernetes pod's pause container or MONROE's no-op
namespace container: a holder that holds the run's network namespace (and keeps its
bounded volumes mounted), and the experiment, which joins it. A :class:`RunNetwork` says
what the holder needs (:meth:`~RunNetwork.holder_needs`), fits the namespace out once
the holder runs (:meth:`~RunNetwork.attach`: what the experiment is told), and undoes
that when the experiment has ended (:meth:`~RunNetwork.detach`).

:class:`SharedNetwork` is the node's namespace shared with the run (the holder joins the
node's container): the run sees what the node sees. A confined network (only the booked
interfaces and loopback) is another implementation of the same Protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class HolderNeeds:
    """What the run's network asks of the holder container."""

    #: "none" to confine; "container:<node>" is the node's namespace, shared.
    network_mode: str
    #: e.g. ("NET_ADMIN",) if the holder configures its own namespace.
    cap_add: tuple[str, ...] = ()
    #: None: the holder only sleeps.
    command: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)


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
    is told the node's own addresses of its interfaces and the node's metadata URL.
    ``address``: an interface's address on the node (None: unknown)."""

    def __init__(self, netns_container: str, *, address: Callable[[str], str | None],
                 metadata_url: str | None) -> None:
        self.netns_container = netns_container
        self.address = address
        self.metadata_url = metadata_url

    def holder_needs(self, run_id: str, booked: Sequence[str]) -> HolderNeeds:
        return HolderNeeds(network_mode=f"container:{self.netns_container}")

    def attach(self, run_id: str, *, holder_pid: int, sandbox_key: str | None,
               booked: Sequence[str]) -> RunNetworkView:
        return RunNetworkView(addresses={name: self.address(name) for name in booked},
                              metadata_url=self.metadata_url)

    def detach(self, run_id: str) -> None:
        return None
