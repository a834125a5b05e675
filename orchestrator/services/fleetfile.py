"""Nodes provisioned at start from a fleet file and their tokens' hashes.

`testbed node add` makes a node and its token through the API, so a node's agent can
only be given its token once the orchestrator answers, and then a provisioning step
stands between the control plane's start and the fleet's. The emulated fleet of the
compose stack has none: `scripts/up` makes each node's token before anything starts
(kept in its secrets file, handed to that node's container only) and gives the
orchestrators the fleet file (deploy/fleet/nodes.yaml) and each token's SHA-256 hash.
Every replica makes the missing nodes at start, before it serves, so the nodes start
in the same compose call as the control plane and register at the front's first answer.
Only hashes reach the orchestrator, as with `testbed node add`. A node that exists is
left as it is: its token may have been rotated since (`testbed node rotate-token`), and
a restart must not bring the old one back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError
from sqlalchemy.orm import Session

from orchestrator.schemas import NodeCreate
from orchestrator.store.locks import creation_lock_name, lock_in_transaction
from orchestrator.store.tables import Node
from testbed_common import safeyaml

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FleetNode:
    node: NodeCreate
    token_hash: str


def parse_token_hashes(text: str) -> dict[str, str]:
    """``ID=SHA256HEX`` items, separated by commas or white space, as a dict. A malformed
    item or a node named twice stops the start: a node left out would never register."""
    hashes: dict[str, str] = {}
    for item in text.replace(",", " ").split():
        node_id, sep, digest = item.partition("=")
        if not sep or not node_id or not _SHA256.match(digest):
            raise ValueError(f"fleet token hash {item[:40]!r} is not ID=<64 hex digits>")
        if node_id in hashes:
            raise ValueError(f"fleet token hashes name node {node_id!r} twice")
        hashes[node_id] = digest
    return hashes


def fleet_nodes(fleet_yaml: str, hashes: dict[str, str]) -> list[FleetNode]:
    """The nodes of a fleet file (``nodes:``, each as ``testbed node add`` takes it) that
    have a token hash; every hash must name a node of the file."""
    doc = safeyaml.load(fleet_yaml, what="the fleet file") or {}
    entries = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the fleet file has no 'nodes:' list")
    try:
        nodes = [NodeCreate.model_validate(entry) for entry in entries]
    except ValidationError as e:
        raise ValueError(f"the fleet file has an invalid node: {e}") from e
    for n in nodes:
        try:
            ZoneInfo(n.timezone)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"node {n.id!r} of the fleet file: unknown time zone "
                             f"{n.timezone!r}") from e
    unknown = sorted(set(hashes) - {n.id for n in nodes})
    if unknown:
        raise ValueError(f"fleet token hashes for nodes not in the fleet file: {unknown}")
    return [FleetNode(n, hashes[n.id]) for n in nodes if n.id in hashes]


def load_fleet(path: Path, token_hashes: str) -> list[FleetNode]:
    return fleet_nodes(path.read_text(), parse_token_hashes(token_hashes))


def ensure_fleet(s: Session, fleet: list[FleetNode], now: datetime) -> list[str]:
    """Make the fleet's missing nodes; the ids made. Replicas starting together each
    find them missing: the creation lock lets one make each."""
    made = []
    for entry in fleet:
        n = entry.node
        lock_in_transaction(s, creation_lock_name("node", n.id))
        if s.get(Node, n.id) is not None:
            continue
        s.add(Node(id=n.id, token_hash=entry.token_hash, country=n.country,
                   timezone=n.timezone, model=n.model, architecture=n.architecture,
                   mobility=n.mobility, tags=n.tags, created_at=now, interfaces=[]))
        made.append(n.id)
    s.flush()
    return made
