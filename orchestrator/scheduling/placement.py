"""The select step of the planner, vectorised across SIMs: where each session goes.

The planner turns campaigns into *lanes* (one node + SIM group + session template) and
*events* (occurrence windows). Placement walks the events in time order; for each
event it places the lanes of that event's time zone together with numpy, slot by slot
(a node's SIMs are measured one after another, never at once). Per event and slot:

1. start = max(window start, now, the node's free-from time in this campaign);
2. push the start past every busy interval of the node that it would touch, padding
   included (earlier campaigns and held runs, in :class:`BusyCalendar`);
3. the session must end inside the window, else the node is busy / the window short;
4. every SIM's period total plus the session's bytes must stay within the usable cap,
   and the project's total within its budget (granted in lane order within an event);
5. granted sessions commit their bytes and move the node's free-from time.

Why vectorised: 30 days of hourly sessions on 10,000 nodes with 3 SIMs are 21.6 M
sessions; a Python loop per session costs ~2 µs, which alone is over the 30 s budget.
Here Python loops run per event and slot (a few thousand), numpy per SIM.

Times are int64 seconds relative to a base; busy intervals are keyed
``node * NODE_STRIDE + time`` so that one ``searchsorted`` serves every node at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Key stride per node: 2**34 s is 544 years, more than any relative time here.
NODE_STRIDE = np.int64(1 << 34)


class Code:
    """Why a lane did not get a session in an event (stored as int8 in arrays)."""

    GRANTED = 0
    NODE_BUSY = 1
    WINDOW_PASSED = 2
    WINDOW_SHORT = 3
    SIM_CAP = 4
    PROJECT_BUDGET = 5


@dataclass(frozen=True)
class BusyCalendar:
    """Disjoint busy intervals of every node, sorted by key (node, start)."""

    start: I64  # node * NODE_STRIDE + relative start
    end: I64
    owner: I64  # index into the planner's owner labels

    @staticmethod
    def build(node: I64, start: I64, end: I64, owner: I64) -> BusyCalendar:
        """Merge overlapping intervals per node (runs of one multi-interface booking
        are stored once per interface with the same times)."""
        if len(node) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return BusyCalendar(empty, empty, empty)
        ks = node * NODE_STRIDE + start
        ke = node * NODE_STRIDE + end
        order = np.argsort(ks, kind="stable")
        ks, ke, owner = ks[order], ke[order], owner[order]
        reach = np.maximum.accumulate(ke)
        head = np.ones(len(ks), dtype=bool)
        head[1:] = ks[1:] >= reach[:-1]
        starts = np.flatnonzero(head)
        return BusyCalendar(ks[starts], np.maximum.reduceat(ke, starts), owner[starts])

    def with_intervals(self, node: I64, start: I64, end: I64, owner: I64) -> BusyCalendar:
        stride = NODE_STRIDE
        node_of = self.start // stride
        return BusyCalendar.build(
            np.concatenate([node_of, node]),
            np.concatenate([self.start - node_of * stride, start]),
            np.concatenate([self.end - node_of * stride, end]),
            np.concatenate([self.owner, owner]),
        )

    def push_past(self, node: I64, start: I64, length: I64, *, pad: int,
                  window_end: int) -> tuple[I64, I64]:
        """Earliest starts >= ``start`` whose session, widened by ``pad``, touches no
        busy interval of its node (or a start past ``window_end``: it cannot fit), and
        the owner of the last interval that pushed each one (-1: none)."""
        s = start.copy()
        blocker = np.full(len(s), -1, dtype=np.int64)
        n_busy = len(self.start)
        if n_busy == 0 or len(s) == 0:
            return s, blocker
        base = node * NODE_STRIDE
        active = np.ones(len(s), dtype=bool)
        while True:
            k = np.searchsorted(self.end, base + s - pad, side="right")
            kk = np.minimum(k, n_busy - 1)
            conflict = active & (k < n_busy) & (self.start[kk] < base + s + length + pad)
            if not conflict.any():
                return s, blocker
            s = np.where(conflict, self.end[kk] - base + pad, s)
            blocker = np.where(conflict, self.owner[kk], blocker)
            active = conflict & (s + length <= window_end)


@dataclass
class QuotaBook:
    """Per-SIM period totals as arrays: ``committed[sim, p]`` against ``limit[sim]``
    for periods ``[bounds[sim, p], bounds[sim, p + 1])``. Mutable, planner-internal."""

    limit: I64  # usable bytes (cap less margin) per SIM
    cap: I64
    bounds: I64  # (n_sims, P + 1), padded with a far-future bound
    committed: I64  # (n_sims, P): used + reserved

    def period_of(self, sims: I64, at: I64) -> I64:
        return np.asarray((self.bounds[sims, 1:] <= at[:, None]).sum(axis=1), dtype=np.int64)


@dataclass
class Outcome:
    """What one call of :func:`place_slot` decided, aligned with its ``lanes``."""

    lanes: I64
    start: I64
    code: npt.NDArray[np.int8]
    percent: F64  # for SIM_CAP / PROJECT_BUDGET: share of the limit it would reach
    blocker: I64  # for NODE_BUSY: owner index, -1 for the campaign itself


@dataclass(frozen=True)
class LaneTable:
    """Lanes of one campaign as arrays (index = lane number within the campaign)."""

    node: I64
    length: I64  # session length, s
    sims: I64  # (L, K) SIM indices into the QuotaBook, -1 = none
    nbytes: I64  # (L, K) bytes the session moves on each SIM
    total: I64  # (L,) sum over SIMs, for the project budget


def place_slot(
    lanes: I64, *, table: LaneTable, window: tuple[int, int, int], free: I64,
    busy: BusyCalendar, quota: QuotaBook, budget: tuple[int, int] | None, pad: int,
) -> tuple[Outcome, int]:
    """Place ``lanes`` (distinct nodes) in ``window`` = (start, end, now); commit what
    is granted to ``free`` and ``quota``; return the outcome and the bytes charged to
    the project. ``budget`` is the project's (budget, committed), None if unlimited."""
    ws, we, now = window
    node = table.node[lanes]
    length = table.length[lanes]
    earliest = max(ws, now)
    s = np.maximum(free[node], earliest)
    s, blocker = busy.push_past(node, s, length, pad=pad, window_end=we)
    fits = s + length <= we
    code = np.where(
        fits, Code.GRANTED,
        np.where(s > earliest, Code.NODE_BUSY,
                 np.where(earliest > ws, Code.WINDOW_PASSED, Code.WINDOW_SHORT)),
    ).astype(np.int8)
    percent = np.zeros(len(lanes))
    sims = table.sims[lanes]
    nbytes = table.nbytes[lanes]
    periods = np.zeros_like(sims)
    for k in range(sims.shape[1]):
        sim = sims[:, k]
        has = sim >= 0
        simk = np.where(has, sim, 0)
        p = quota.period_of(simk, s)
        periods[:, k] = p
        after = quota.committed[simk, p] + nbytes[:, k]
        over = has & (after > quota.limit[simk]) & (code == Code.GRANTED)
        code[over] = Code.SIM_CAP
        percent = np.where(over, 100.0 * after / np.maximum(quota.cap[simk], 1), percent)
    ok = code == Code.GRANTED
    if budget is not None:
        limit, committed = budget
        spend = committed + np.cumsum(np.where(ok, table.total[lanes], 0))
        refused = ok & (spend > limit)
        code[refused] = Code.PROJECT_BUDGET
        percent = np.where(refused, 100.0 * spend / max(limit, 1), percent)
        ok &= ~refused
    for k in range(sims.shape[1]):
        take = ok & (sims[:, k] >= 0)
        np.add.at(quota.committed, (sims[take, k], periods[take, k]), nbytes[take, k])
    charged = int(table.total[lanes][ok].sum())
    free[node[ok]] = s[ok] + length[ok] + pad
    blocker = np.where(code == Code.NODE_BUSY, blocker, -1)
    return Outcome(lanes, s, code, percent, blocker), charged
