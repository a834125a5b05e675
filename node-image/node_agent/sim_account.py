"""The node's own account of each SIM's cap, for the hours it spends offline.

Each run already carries its reservation (``Assignment.max_bytes``), which the meter and
the kernel quota hold it to. What a reservation cannot see is the SIM as a whole while
the node is out of contact: the orchestrator cannot settle what the node measures, nor
tell it that an operator lowered the cap or that runs overran. So every heartbeat reply
says what is left of each SIM's cap for the node (``HeartbeatReply.sim_left_bytes``:
the usable cap less what was charged, less reservations of runs not handed out), and the
node counts down from it the bytes its runs measure that the orchestrator had not
counted yet. A run whose reservation is more than what is left is refused, with the
reason, reported when the node is back.

Which measured bytes the last reply had counted: a run's bytes reach the orchestrator's
charges with its end report. A run whose end report was still in the outbox when the
heartbeat left (or that was running then) was not counted, so it stays on the account;
any run that ends later is added. (A report delivered between the heartbeat's send and
its reply is counted twice: on the safe side.)

:class:`SimAccount` is a pure value; :func:`load_account` / :func:`save_account`
keep it in the state directory, so it survives an agent restart while offline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from node_agent.statefile import write_state


@dataclass(frozen=True)
class Spent:
    """Bytes one run measured on one interface, not yet in the orchestrator's charges."""

    run_id: str
    interface: str
    nbytes: int


@dataclass(frozen=True)
class SimAccount:
    #: Interface -> bytes left on its SIM at the last reply (absent: no cap, no check).
    left_at_contact: Mapping[str, int] = field(default_factory=dict)
    #: Runs measured since, or not counted by, the last reply.
    spent: tuple[Spent, ...] = ()

    def left(self, interface: str) -> int | None:
        """Bytes the node may still move on ``interface``'s SIM; None: no cap known."""
        start = self.left_at_contact.get(interface)
        if start is None:
            return None
        return start - sum(s.nbytes for s in self.spent if s.interface == interface)

    def refusal(self, *, run_id: str, interface: str, max_bytes: int) -> str | None:
        """None when the run's reservation fits in what is left of its SIM's cap; else
        the reason the node refuses it."""
        left = self.left(interface)
        if left is None or max_bytes <= left:
            return None
        return (f"refused by the node: run {run_id} reserves {max_bytes} bytes, but its "
                f"SIM on {interface} has only {max(0, left)} bytes left of its cap "
                f"(what the orchestrator last said was left, less "
                f"{self.left_at_contact[interface] - left} bytes the node measured since)")

    def measured(self, *, run_id: str, interface: str, nbytes: int) -> SimAccount:
        """The account once a run has measured ``nbytes`` on ``interface``."""
        return replace(self, spent=(*self.spent, Spent(run_id, interface, max(0, nbytes))))

    def contact(self, left: Mapping[str, int], *, uncounted: Iterable[str]) -> SimAccount:
        """The account after a heartbeat reply saying ``left`` per interface;
        ``uncounted``: the runs whose end the orchestrator had not heard of when the
        heartbeat left (reports in the outbox, the run in progress)."""
        keep = set(uncounted)
        return SimAccount(dict(left), tuple(s for s in self.spent if s.run_id in keep))

    def to_json(self) -> dict[str, Any]:
        return {"left_at_contact": dict(self.left_at_contact),
                "spent": [[s.run_id, s.interface, s.nbytes] for s in self.spent]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimAccount:
        left = {str(k): int(v) for k, v in dict(data.get("left_at_contact", {})).items()}
        spent = tuple(Spent(str(r), str(i), int(n)) for r, i, n in data.get("spent", []))
        return cls(left, spent)


def save_account(account: SimAccount, path: Path) -> None:
    """Keep the account on disk (:func:`node_agent.statefile.write_state`: atomic; a
    failed write is logged and the account in memory goes on)."""
    write_state(path, account.to_json(), what="SIM account")


def load_account(path: Path) -> SimAccount:
    """The saved account; an empty one (no cap known, nothing refused) when there is
    none or it cannot be read, as before the first reply."""
    try:
        return SimAccount.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return SimAccount()
