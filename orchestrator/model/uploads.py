"""Which uploads the orchestrator takes: pure decisions, each refusal with its reason.

- A bundle exists only for a run its node took up. A run still scheduled or assigned,
  or one cancelled or expired before deploying, has no results: a bundle for it is
  refused, so it can neither be archived against a run that never ran nor block the
  real bundle later. A run that failed after deploying keeps its logs. One exception:
  a run cancelled after it was handed to its node may have run offline before the node
  learned of the cancellation; its bundle is real results, and is taken
  (:func:`ran_after_cancel`: the run becomes done, saying so).
- A node holds at most a cap of bytes in unfinished uploads, so abandoned parts cannot
  fill the orchestrator's disk (they expire when idle; see ``services.partials``).
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.model.contact import TOOK_UP
from testbed_common.states import RunState

#: States a run passes through only once its node took it up: from here on the node
#: holds a run directory, and a bundle of its results or of its failure's logs.
TAKEN_UP = frozenset({RunState.DEPLOYING, RunState.RUNNING, RunState.UPLOADING,
                      RunState.UNREACHABLE})

#: States in which a bundle is awaited (``running``: it may overtake its last report;
#: ``unreachable``: a node back in contact sends its spool, the bundle may come first).
AWAITING = frozenset({RunState.RUNNING, RunState.UPLOADING, RunState.UNREACHABLE})


def ran_after_cancel(state: RunState, history: Iterable[RunState]) -> bool:
    """Whether a bundle for the run can only mean its node ran it offline after it was
    cancelled: cancelled once handed out (assigned), never seen taken up."""
    seen = frozenset(history)
    return (state == RunState.CANCELLED and RunState.ASSIGNED in seen
            and not TOOK_UP.intersection(seen))


def bundle_refusal(run_id: str, state: RunState, history: Iterable[RunState]) -> str | None:
    """None when a bundle can exist for the run; else why it is refused.

    ``history`` holds every state the run has been in (its events).
    """
    history = frozenset(history)
    if state in AWAITING:
        return None
    if state.final and TAKEN_UP.intersection(history):
        return None  # a late bundle, or a failed run's logs: kept
    if ran_after_cancel(state, history):
        return None  # its node held it and ran it offline, not knowing of the cancel
    if state.final:
        return (
            f"run {run_id} is {state.value} and never started on its node, so it has no "
            "results; a bundle for it is refused (the node should discard it)"
        )
    return (
        f"run {run_id} is {state.value}: it has not run yet, so it has no results; "
        "upload its bundle once it has run"
    )


def node_cap_refusal(*, node_id: str, held_elsewhere: int, held_after: int, cap: int) -> str | None:
    """None when the node may hold ``held_after`` bytes in this upload, given what its
    other unfinished uploads hold; else why not (the sender retries later)."""
    total = held_elsewhere + held_after
    if total <= cap:
        return None
    return (
        f"node {node_id} would hold {total} bytes in unfinished uploads, over its cap of "
        f"{cap} ({held_elsewhere} in other runs' uploads); retry later: idle uploads "
        "expire, or raise TESTBED_UPLOADS__MAX_PART_BYTES_PER_NODE"
    )
