"""Who runs the background loops (pure: no I/O, no clock of its own).

Replicas share one lease row (``services.leader``): its holder and when it expires, by
the database's clock, so replicas' clocks need not agree. A replica takes a lease that
is free or expired, renews its own every third of the lease, and acts as leader only
while its last successful renewal is younger than two thirds of the lease, measured on
its own monotonic clock from before the renewal was sent. So a leader cut off from the
database stops acting a third of a lease before anyone else may take over, and when a
leader dies another replica takes over within ``takeover_bound_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from orchestrator.model.expiry import expired


@dataclass(frozen=True)
class Lease:
    holder: str
    expires_at: datetime


class Claim(Enum):
    TAKE = "take"    # free or expired: becomes ours
    RENEW = "renew"  # ours: extended
    WAIT = "wait"    # another replica's, still valid


def claim(current: Lease | None, me: str, now: datetime) -> Claim:
    """What ``me`` may do with the lease at ``now`` (the database's clock)."""
    if current is None:
        return Claim.TAKE
    if current.holder == me:
        return Claim.RENEW
    if expired(current.expires_at, now):
        return Claim.TAKE
    return Claim.WAIT


def renew_every_s(lease_s: float) -> float:
    """How often every replica tries the lease: a third of it."""
    return lease_s / 3


def still_leading(renewed_at: float | None, now: float, lease_s: float) -> bool:
    """Whether a replica whose last successful renewal was sent at ``renewed_at``
    (monotonic seconds; None: never, or lost) may still act as leader at ``now``."""
    return renewed_at is not None and now - renewed_at < 2 * lease_s / 3


def takeover_bound_s(lease_s: float) -> float:
    """The longest from a leader's death until another replica leads: its lease
    expires at most a lease after its last renewal, which came before it died, and a
    follower tries again within a renewal interval after that."""
    return lease_s + renew_every_s(lease_s)


def planning_due(*, leading: bool, elapsed_s: float, interval_s: float, moved: bool,
                 wanted: bool) -> bool:
    """Whether a process's planner makes a pass now: the leader every ``interval_s``
    and when the fleet's availability ``moved``; any process when a pass is ``wanted``
    there (a run failed, a quota changed: passes are serialised across replicas, so
    a follower's is as safe as a request's, and sooner than the leader's next one)."""
    return wanted or (leading and (elapsed_s >= interval_s or moved))
