"""Leases on shared work (a run's ingest): which worker may take a piece of work,
and whether it still holds it. The loops' leader lease is :mod:`orchestrator.model.lease`.
Pure decisions; the ingest claims (:mod:`orchestrator.services.ingestclaims`)
apply them to runs in the database, in one conditional statement each, so that two
workers deciding at once cannot both win.

A claim is an owner (a worker's id) and the time its lease ends. Work is free when no
one claims it or the lease has ended (:func:`orchestrator.model.expiry.expired`, the
rule of every lease): a worker that died is taken over once its lease is out, not
before (a slow worker is not a dead one). A worker keeps what it holds by
renewing before the lease ends, and may renew even after it ended as long as no other
worker took the work over; it can finish only what it still holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.model.expiry import expired

#: Characters of a worker's id, the width of the column that stores it.
OWNER_MAX = 64


@dataclass(frozen=True)
class Claim:
    owner: str | None
    until: datetime | None


def is_free(claim: Claim, now: datetime) -> bool:
    """Whether a worker may take the work now: unclaimed, or its lease has ended."""
    return claim.owner is None or claim.until is None or expired(claim.until, now)


def holds(claim: Claim, owner: str) -> bool:
    """Whether ``owner`` still holds the work (and so may renew or finish it): the claim
    is still its own. An ended lease that nobody took over is still held."""
    return claim.owner == owner


def lease_end(now: datetime, lease_s: float) -> datetime:
    """When a claim taken or renewed now ends."""
    if lease_s <= 0:
        raise ValueError(f"a lease must be positive, not {lease_s} s")
    return now + timedelta(seconds=lease_s)


def worker_id(host: str, pid: int, nonce: str) -> str:
    """A worker's id, at most :data:`OWNER_MAX` characters: host and process (so an
    operator can tell who holds a run) and a random ``nonce``, so that a restarted
    process with a reused pid is another worker."""
    tail = f":{pid}:{nonce}"
    return host[: max(0, OWNER_MAX - len(tail))] + tail
