"""Short-flow completion times against an idealised model, and what they are sensitive to
(pure).

After Garcia et al.'s study of short TCP flows in Swedish 3.5G/4G networks (J. Garcia,
S. Alfredsson, A. Brunstrom et al., "Examining TCP short flow performance in cellular
networks through active and passive measurements"): a flow of S bytes on a fresh
connection spends most of its life in slow start, so its completion time is set by
round trips more than by capacity. The reference draws beside the measured completion
times an idealised L(S) built from slow-start rounds, the path's base RTT and the
capacity seen by the long flow, and states that a 10 % longer RTT hurts short flows
more than a 10 % lower capacity.

The model here (:func:`model_fct_s`) is that idealised, loss-free slow start, timed
from the first SYN to the last data byte's arrival (which the receiver ACKs at once):

    L(S) = 2 RTT + S * 8 / C + sum_{k=1..K-1} max(0, RTT + MSS * 8 / C - w_k * 8 / C)

one RTT for the handshake, one for the request and the data's way back, the
serialisation of all S bytes at the capacity C, and a stall after each window w_k =
IW * 2^(k-1) * MSS that is sent before its first segment's ACK can return (K windows
cover S; the last one is what is left). It is the slow-start latency of Kurose and
Ross ("Computer Networking", TCP latency modelling; their P stalls are the positive
terms) with an initial window of IW segments, and the window-doubling rounds of
Cardwell, Savage and Anderson ("Modeling TCP latency", INFOCOM 2000) without losses or
delayed ACKs, at a finite capacity. IW = 10 segments (RFC 6928, as the experiment runs),
MSS = 1448 bytes (1500-byte MTU, TCP timestamps). In the uplink the node sends: its
capture sees the last byte ACKed one RTT after it left, which is the same sum.

The sensitivity is stated two ways: from the model (L at 1.1 x RTT and at 0.9 x C,
against L), and from the measurements, by regressing the log completion time of the
short flows on the log handshake RTT and the log long-flow rate of the same session
(one intercept per size): elasticities e_rtt and e_cap give 1.1^e_rtt - 1 and
0.9^e_cap - 1.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: RFC 6928's initial window, in segments, as the experiment runs with.
INITIAL_WINDOW = 10
#: Payload of a full segment on a 1500-byte MTU path with TCP timestamps, bytes.
MSS = 1448
#: The reference's perturbation: 10 % longer RTT against 10 % lower capacity.
STEP = 0.10
#: Fewest sessions (with both a handshake RTT and a long-flow rate) for a regression.
MIN_SESSIONS = 4


def model_fct_s(size: int, *, rtt_s: float, capacity_bps: float,
                mss: int = MSS, initial_window: int = INITIAL_WINDOW) -> float:
    """The idealised completion time L(S) of a ``size``-byte flow (module docstring)."""
    if size <= 0 or rtt_s <= 0 or capacity_bps <= 0 or mss <= 0 or initial_window <= 0:
        raise ValueError("size, rtt_s, capacity_bps, mss and initial_window must be positive")
    segment_s = mss * 8 / capacity_bps
    total = 2 * rtt_s + size * 8 / capacity_bps
    left, window = size - initial_window * mss, initial_window * mss
    while left > 0:  # window ``window`` was sent and more is left: it may stall
        total += max(0.0, rtt_s + segment_s - window * 8 / capacity_bps)
        window *= 2
        left -= window
    return total


@dataclass(frozen=True)
class Sensitivity:
    """How much longer flows take with 10 % more RTT, and with 10 % less capacity
    (fractions: 0.08 is 8 % longer)."""

    rtt_up: float
    capacity_down: float

    @property
    def rtt_hurts_more(self) -> bool:
        return self.rtt_up > self.capacity_down


def model_sensitivity(size: int, *, rtt_s: float, capacity_bps: float) -> Sensitivity:
    base = model_fct_s(size, rtt_s=rtt_s, capacity_bps=capacity_bps)
    return Sensitivity(
        rtt_up=model_fct_s(size, rtt_s=rtt_s * (1 + STEP), capacity_bps=capacity_bps)
        / base - 1,
        capacity_down=model_fct_s(size, rtt_s=rtt_s, capacity_bps=capacity_bps * (1 - STEP))
        / base - 1)


@dataclass(frozen=True)
class FlowSample:
    """One measured flow (status ``ok``), with the session it belongs to."""

    session: str
    time_ns: int
    kind: str  # "short" or "long"
    size_bytes: int
    fct_s: float
    rtt_3whs_s: float | None


def base_rtt_s(samples: Sequence[FlowSample]) -> float | None:
    """The path's base RTT: the median handshake RTT of the flows (each handshake is
    one unloaded round trip on a fresh connection)."""
    rtts = [s.rtt_3whs_s for s in samples if s.rtt_3whs_s]
    return statistics.median(rtts) if rtts else None


def long_rate_bps(sample: FlowSample) -> float:
    return sample.size_bytes * 8 / sample.fct_s


def capacity_bps(samples: Sequence[FlowSample]) -> float | None:
    """The long flow's median rate: the capacity the model's rounds fill."""
    rates = [long_rate_bps(s) for s in samples if s.kind == "long" and s.fct_s > 0]
    return statistics.median(rates) if rates else None


def measured_sensitivity(samples: Sequence[FlowSample]) -> Sensitivity | None:
    """The sensitivity from the measurements (module docstring), or None with fewer
    than :data:`MIN_SESSIONS` sessions or no spread in RTT or rate to regress on."""
    sessions: dict[str, list[FlowSample]] = defaultdict(list)
    for s in samples:
        sessions[s.session].append(s)
    rows: list[tuple[int, float, float, float]] = []  # size, log rtt, log rate, log fct
    used = 0
    for flows in sessions.values():
        longs = [f for f in flows if f.kind == "long" and f.fct_s > 0]
        rtt = base_rtt_s(flows)
        if not longs or rtt is None:
            continue
        rate = math.log(long_rate_bps(longs[0]))
        used += 1
        rows.extend((f.size_bytes, math.log(f.rtt_3whs_s), rate, math.log(f.fct_s))
                    for f in flows if f.kind == "short" and f.fct_s > 0 and f.rtt_3whs_s)
    if used < MIN_SESSIONS or not rows:
        return None
    sizes = sorted({r[0] for r in rows})
    x = np.zeros((len(rows), len(sizes) + 2))
    for i, (size, lrtt, lrate, _) in enumerate(rows):
        x[i, sizes.index(size)] = 1.0
        x[i, -2], x[i, -1] = lrtt, lrate
    if np.ptp(x[:, -2]) == 0 or np.ptp(x[:, -1]) == 0:
        return None
    y = np.array([r[3] for r in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    e_rtt, e_cap = float(coef[-2]), float(coef[-1])
    return Sensitivity(rtt_up=(1 + STEP) ** e_rtt - 1, capacity_down=(1 - STEP) ** e_cap - 1)


def median_fct_by_size(samples: Sequence[FlowSample]) -> dict[int, float]:
    """The median completion time of each short-flow size."""
    by: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        if s.kind == "short":
            by[s.size_bytes].append(s.fct_s)
    return {size: statistics.median(v) for size, v in sorted(by.items())}
