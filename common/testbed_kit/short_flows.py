"""The ``testbed.short-flows`` result: what a short-flows session did, and its parser
(pure: no I/O, stdlib only).

The experiment (experiments/short-flows) opens one fresh TCP connection per flow to
the measurement server's flow responder and writes this record of each: its size, its
kind (short or long), the client's local port (which names the connection in the
run's packet captures), and the client's own timer. The timer is kept for reference
only: completion time, handshake RTT and retransmissions come from the captures
(orchestrator ingest, :mod:`orchestrator.timeseries.shortflows`), because the tool
sees neither the handshake nor the last ACK.

The sizes are those of Garcia et al.'s Swedish 3.5G/4G time-of-day study: 11 sizes
geometrically spaced from 1,388 bytes (one full-sized segment's payload) to 327,568
bytes, and one long flow (20 MiB there) from which the link's capacity is taken.

The responder's protocol (server-image/flow_responder.py): the client sends one ASCII
line ``down <bytes>\\n`` (the server sends that many bytes and closes) or
``up <bytes>\\n`` (the client sends that many bytes and half-closes; the server reads
them all, answers ``ok\\n`` and closes). cca-compare adds options after the size
(:class:`FlowRequest`): ``cca=<name>``, the congestion control the sender uses, and
``seconds=<s>``, a timed flow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FORMAT = "testbed.short-flows"
VERSION = 1
DIRECTIONS = ("uplink", "downlink")
KINDS = ("short", "long")
#: Garcia et al.'s smallest and largest short flow, bytes.
SMALLEST, LARGEST = 1388, 327_568
#: How many short flows a session has (Garcia et al.: 11).
COUNT = 11
#: The responder's bounds on one flow: the largest long flow a session may ask for
#: (the manifest's bound on ``long_bytes``), bytes.
MAX_FLOW_BYTES = 1 << 30
#: The responder's TCP port (server-image/testbed-server.sh).
RESPONDER_PORT = 5301


def short_sizes() -> list[int]:
    """The 11 short-flow sizes: geometric from :data:`SMALLEST` to :data:`LARGEST`,
    rounded to whole bytes (1388, 2397, 4140, ... 189675, 327568)."""
    ratio = LARGEST / SMALLEST
    return [round(SMALLEST * ratio ** (k / (COUNT - 1))) for k in range(COUNT)]


def request_line(direction: str, size: int) -> bytes:
    """The line a client sends first: ``down`` when the server sends (downlink)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    if not 0 < size <= MAX_FLOW_BYTES:
        raise ValueError(f"a flow moves 1 to {MAX_FLOW_BYTES} bytes, not {size}")
    return f"{'down' if direction == 'downlink' else 'up'} {size}\n".encode()


def parse_request(line: bytes) -> tuple[str, int]:
    """The responder's side of :func:`request_line`: (direction, bytes). ValueError, with
    what was wrong, for anything else (the responder answers it and closes)."""
    request = parse_flow_request(line)
    return request.direction, request.size


#: The longest a timed flow may last, s (the cca-compare manifest's bound).
MAX_FLOW_SECONDS = 600
#: A congestion control's name as Linux spells them ("cubic", "bbr", "reno", ...).
_CCA_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}")


@dataclass(frozen=True)
class FlowRequest:
    """One request line with its options: ``cca`` is the congestion control the
    sender sets on the connection (``TCP_CONGESTION``; the server's when it sends, the
    client's own otherwise), ``seconds`` makes the flow timed: the sender stops after
    that long or ``size`` bytes, whichever comes first (the uplink's answer then says
    how many bytes arrived)."""

    direction: str
    size: int
    cca: str | None = None
    seconds: float | None = None

    def line(self) -> bytes:
        """The line a client sends for this request."""
        words = [request_line(self.direction, self.size).decode().strip()]
        if self.cca is not None:
            words.append(f"cca={self.cca}")
        if self.seconds is not None:
            words.append(f"seconds={self.seconds:g}")
        parse_flow_request(" ".join(words).encode())  # the same checks as the server's
        return (" ".join(words) + "\n").encode()


def parse_flow_request(line: bytes) -> FlowRequest:
    """``down|up <bytes> [cca=<name>] [seconds=<s>]`` as a :class:`FlowRequest`
    (short-flows sends neither option, cca-compare both). ValueError, with what was
    wrong, for anything else."""
    words = line.decode("ascii", errors="replace").split()
    if len(words) < 2 or words[0] not in ("down", "up") or not words[1].isdigit():
        raise ValueError(f"expected 'down <bytes>' or 'up <bytes>', got {line[:40]!r}")
    size = int(words[1])
    if not 0 < size <= MAX_FLOW_BYTES:
        raise ValueError(f"a flow moves 1 to {MAX_FLOW_BYTES} bytes, not {size}")
    options: dict[str, str] = {}
    for word in words[2:]:
        key, eq, value = word.partition("=")
        if not eq or key not in ("cca", "seconds") or key in options:
            raise ValueError(f"unknown or repeated option {word[:24]!r}: cca=, seconds=")
        options[key] = value
    cca = options.get("cca")
    if cca is not None and not _CCA_NAME.fullmatch(cca):
        raise ValueError(f"cca must be a congestion control's name, not {cca[:20]!r}")
    seconds: float | None = None
    if "seconds" in options:
        try:
            seconds = float(options["seconds"])
        except ValueError:
            seconds = -1.0
        if not 0 < seconds <= MAX_FLOW_SECONDS:  # NaN too
            raise ValueError(f"seconds must be in (0, {MAX_FLOW_SECONDS}], not "
                             f"{options['seconds'][:20]!r}")
    return FlowRequest(direction="downlink" if words[0] == "down" else "uplink",
                       size=size, cca=cca, seconds=seconds)


@dataclass(frozen=True)
class FlowRecord:
    """One flow as the client saw it; ``error`` when it did not complete."""

    index: int
    kind: str  # "short" or "long"
    size_bytes: int
    local_port: int  # the client's port: the connection's name in the captures
    start_unix_s: float  # connect() called
    tool_s: float | None  # the client's timer, connect() to the last byte: reference only
    bytes_moved: int
    error: str | None = None


@dataclass(frozen=True)
class ShortFlowsResult:
    direction: str
    server: str
    port: int
    interface: str
    start: str  # ISO 8601, UTC
    long_bytes: int
    settings: Mapping[str, str]  # the TCP settings the session ran with, as read back
    flows: tuple[FlowRecord, ...]


class ShortFlowsOutputError(ValueError):
    """A result file that is not a usable ``testbed.short-flows`` v1 document."""


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShortFlowsOutputError(f"{what} must be an integer, not {value!r}")
    return value


def _num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ShortFlowsOutputError(f"{what} must be a number, not {value!r}")
    return float(value)


def _flow(i: int, f: Any) -> FlowRecord:
    if not isinstance(f, Mapping):
        raise ShortFlowsOutputError(f"flow {i} is not an object")
    kind = f.get("kind")
    if kind not in KINDS:
        raise ShortFlowsOutputError(f"flow {i}: kind must be one of {KINDS}, not {kind!r}")
    port = _int(f.get("local_port"), f"flow {i}: local_port")
    if not 0 <= port <= 65535:
        raise ShortFlowsOutputError(f"flow {i}: local_port {port} is no TCP port")
    tool = f.get("tool_s")
    error = f.get("error")
    return FlowRecord(
        index=_int(f.get("index"), f"flow {i}: index"), kind=str(kind),
        size_bytes=_int(f.get("size_bytes"), f"flow {i}: size_bytes"), local_port=port,
        start_unix_s=_num(f.get("start_unix_s"), f"flow {i}: start_unix_s"),
        tool_s=None if tool is None else _num(tool, f"flow {i}: tool_s"),
        bytes_moved=_int(f.get("bytes_moved"), f"flow {i}: bytes_moved"),
        error=None if error is None else str(error))


def parse_result(doc: Mapping[str, Any]) -> ShortFlowsResult:
    """A decoded result file as :class:`ShortFlowsResult`; :class:`ShortFlowsOutputError`
    naming the first thing wrong (another format or version included)."""
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ShortFlowsOutputError(f"not a {FORMAT} v{VERSION} result: "
                                    f"{doc.get('format')!r} v{doc.get('version')!r}")
    direction = doc.get("direction")
    if direction not in DIRECTIONS:
        raise ShortFlowsOutputError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    flows = doc.get("flows")
    if not isinstance(flows, list):
        raise ShortFlowsOutputError("the result has no 'flows' list")
    settings = doc.get("settings") or {}
    if not isinstance(settings, Mapping):
        raise ShortFlowsOutputError("'settings' must be an object")
    return ShortFlowsResult(
        direction=str(direction), server=str(doc.get("server", "")),
        port=_int(doc.get("port"), "port"), interface=str(doc.get("interface", "")),
        start=str(doc.get("start", "")),
        long_bytes=_int(doc.get("long_bytes"), "long_bytes"),
        settings={str(k): str(v) for k, v in settings.items()},
        flows=tuple(_flow(i, f) for i, f in enumerate(flows)))
