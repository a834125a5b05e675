"""The ``testbed.cca-compare`` result: what a CUBIC-vs-BBR session did, its plan, and its
parser (pure: no I/O, stdlib only).

After Li et al.'s highway drives: one session alternates the two congestion controls on
the same radio conditions, so that their difference is not the road's. Each transfer is
a fresh TCP connection to the measurement server's flow responder
(server-image/flow_responder.py) whose sender sets the congestion control on that
connection (``TCP_CONGESTION``): the server for downlink (``cca=`` in the request), the
node's own socket for uplink. Two kinds of transfer:

- ``bulk``: a timed flow of ``bulk_s`` seconds (20 s in the study), for throughput,
  self-inflicted delay, retransmissions and duplicate ACKs in steady state;
- ``download``: ``download_bytes`` (1 MB), where slow start and the start-up phase
  (BBR's STARTUP) decide the outcome.

The order is balanced across repetitions (ABBA): repetition 0 runs CUBIC first, 1 BBR
first, and so on, for each kind, so that neither control always gets the first (or the
fresher) slot of a period. The figures are not in this file: ingest joins each transfer
(by its local port) with the capture taken at the sender and with the node's modem
samples of its span (:mod:`orchestrator.timeseries.ccacompare`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FORMAT = "testbed.cca-compare"
VERSION = 1
CCAS = ("cubic", "bbr")
KINDS = ("bulk", "download")
DIRECTIONS = ("uplink", "downlink")


@dataclass(frozen=True)
class Planned:
    """One transfer of a session's plan."""

    index: int
    repetition: int
    cca: str
    kind: str


def plan(repetitions: int, ccas: Sequence[str] = CCAS) -> list[Planned]:
    """The session's transfers in order: per repetition, each kind (bulk, then the
    download), each with every control, the controls' order reversed every other
    repetition (ABBA...), so each control goes first equally often over an even count."""
    if repetitions < 1:
        raise ValueError(f"a session needs at least one repetition, not {repetitions}")
    out: list[Planned] = []
    for rep in range(repetitions):
        order = list(ccas) if rep % 2 == 0 else list(reversed(ccas))
        for kind in KINDS:
            for cca in order:
                out.append(Planned(index=len(out), repetition=rep, cca=cca, kind=kind))
    return out


@dataclass(frozen=True)
class Transfer:
    """One transfer as the client saw it; ``error`` when it did not complete."""

    index: int
    repetition: int
    cca: str
    kind: str
    local_port: int  # the client's port: the connection's name in the captures
    start_unix_s: float  # connect() called (node clock)
    end_unix_s: float  # the last byte moved, or the failure
    bytes_moved: int
    error: str | None = None


@dataclass(frozen=True)
class CcaCompareResult:
    direction: str
    server: str
    port: int
    interface: str
    start: str  # ISO 8601, UTC
    bulk_s: float
    download_bytes: int
    transfers: tuple[Transfer, ...]

    @property
    def sender(self) -> str:
        """Where the sender's capture was taken: ``server`` for downlink, ``node``."""
        return "server" if self.direction == "downlink" else "node"


class CcaCompareOutputError(ValueError):
    """A result file that is not a usable ``testbed.cca-compare`` v1 document."""


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CcaCompareOutputError(f"{what} must be an integer, not {value!r}")
    return value


def _num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CcaCompareOutputError(f"{what} must be a number, not {value!r}")
    return float(value)


def _transfer(i: int, t: Any) -> Transfer:
    if not isinstance(t, Mapping):
        raise CcaCompareOutputError(f"transfer {i} is not an object")
    cca, kind = t.get("cca"), t.get("kind")
    if cca not in CCAS:
        raise CcaCompareOutputError(f"transfer {i}: cca must be one of {CCAS}, not {cca!r}")
    if kind not in KINDS:
        raise CcaCompareOutputError(f"transfer {i}: kind must be one of {KINDS}, not {kind!r}")
    port = _int(t.get("local_port"), f"transfer {i}: local_port")
    if not 0 <= port <= 65535:
        raise CcaCompareOutputError(f"transfer {i}: local_port {port} is no TCP port")
    start = _num(t.get("start_unix_s"), f"transfer {i}: start_unix_s")
    end = _num(t.get("end_unix_s"), f"transfer {i}: end_unix_s")
    if end < start:
        raise CcaCompareOutputError(f"transfer {i} ends before it starts")
    error = t.get("error")
    return Transfer(
        index=_int(t.get("index"), f"transfer {i}: index"),
        repetition=_int(t.get("repetition"), f"transfer {i}: repetition"),
        cca=str(cca), kind=str(kind), local_port=port, start_unix_s=start,
        end_unix_s=end, bytes_moved=_int(t.get("bytes_moved"), f"transfer {i}: bytes_moved"),
        error=None if error is None else str(error))


def parse_result(doc: Mapping[str, Any]) -> CcaCompareResult:
    """A decoded result file as :class:`CcaCompareResult`; :class:`CcaCompareOutputError`
    naming the first thing wrong (another format or version included)."""
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise CcaCompareOutputError(f"not a {FORMAT} v{VERSION} result: "
                                    f"{doc.get('format')!r} v{doc.get('version')!r}")
    direction = doc.get("direction")
    if direction not in DIRECTIONS:
        raise CcaCompareOutputError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    transfers = doc.get("transfers")
    if not isinstance(transfers, list):
        raise CcaCompareOutputError("the result has no 'transfers' list")
    return CcaCompareResult(
        direction=str(direction), server=str(doc.get("server", "")),
        port=_int(doc.get("port"), "port"), interface=str(doc.get("interface", "")),
        start=str(doc.get("start", "")), bulk_s=_num(doc.get("bulk_s"), "bulk_s"),
        download_bytes=_int(doc.get("download_bytes"), "download_bytes"),
        transfers=tuple(_transfer(i, t) for i, t in enumerate(transfers)))
