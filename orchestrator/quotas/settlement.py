"""The settlement rule: what a finished run is charged against its reservation.

This is the one place the rule lives. The service (``orchestrator.services.quotas``)
reads the run from the database, asks :func:`settle`, and stores the answer on the run
row (charged and overrun bytes); usage is then summed from those stored answers
(:func:`orchestrator.quotas.ledger.usage_from_journal`), so no other code repeats it.

The rule, today:

- the agent measured the run's traffic: charge exactly that (more than reserved is an
  overrun, recorded and shown, never silently absorbed);
- the run never started (cancelled or expired before deploying): charge nothing, the
  whole reservation is released;
- the run started but nobody measured it: charge the whole reservation (the safe side:
  a SIM's cap costs money, so unknown traffic is assumed to have happened).

A run whose node is out of contact (``unreachable``) is not settled: its reservation
stays held until the node's report or bundle brings the measured bytes, or the horizon
fails it (then it is a started, unmeasured run).

A run cancelled after it was handed to its node, before any start was seen, is not
settled at the cancel either: the node, out of contact, may run it before it learns of
the cancellation, and releasing its bytes then could let them be booked twice (an
overrun). Its reservation stays held until the node says it dropped the run unstarted
(not started: charged nothing), its bundle arrives (measured), or the horizon passes
after the cancel (started, unmeasured: the whole reservation). The decisions are
``orchestrator.model.contact``'s (``cancel_holds_reservation``, ``releases_dropped``,
``held_cancel_expired``); the charge is this rule's.

No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.quotas.ledger import Reservation, fmt_bytes


class ChargeBasis(StrEnum):
    """Why a settlement charged what it did (shown in the overrun note)."""

    MEASURED = "measured by the agent"
    NOT_STARTED = "the run never started: reservation released"
    UNMEASURED = "not measured: the whole reservation is charged"


@dataclass(frozen=True)
class Settlement:
    reservation: Reservation
    charged_bytes: int
    #: Reserved bytes given back at once (the reservation less the charge, if positive).
    released_bytes: int
    #: Charged bytes beyond the reservation.
    overrun_bytes: int
    basis: ChargeBasis

    def overrun_note(self) -> str | None:
        """The event text that explains an overrun, or None when there is none."""
        if not self.overrun_bytes:
            return None
        r = self.reservation
        return (f"quota overrun: {fmt_bytes(self.charged_bytes)} {self.basis.value}, "
                f"{fmt_bytes(self.overrun_bytes)} over the {fmt_bytes(r.nbytes)} reserved "
                f"on SIM {r.sim.mcc_mnc} of {r.sim.node}/{r.sim.interface}")


def settle(reservation: Reservation, *, measured_bytes: int | None,
           started: bool) -> Settlement:
    """Settle one reservation from what is known about its run (see the module
    docstring for the rule). The caller settles each reservation once: the service
    does it on the run's move to a final state or to ``uploading``."""
    if measured_bytes is not None and measured_bytes < 0:
        raise ValueError(f"measured volume cannot be negative ({measured_bytes} bytes)")
    if measured_bytes is not None:
        charged, basis = measured_bytes, ChargeBasis.MEASURED
    elif not started:
        charged, basis = 0, ChargeBasis.NOT_STARTED
    else:
        charged, basis = reservation.nbytes, ChargeBasis.UNMEASURED
    return Settlement(reservation, charged, max(0, reservation.nbytes - charged),
                      max(0, charged - reservation.nbytes), basis)
