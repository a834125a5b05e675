"""GPS metadata as :class:`GpsSample`: from gpsd on a real node, from linkem on an
emulated moving node.

The parsers are pure; :class:`GpsdReader` connects to gpsd (TCP 2947), enables JSON
watching and returns the first TPV report, with a timeout on every step;
:class:`LinkemGpsReader` reads the ``position`` of a linkem state file.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from node_agent.metadata.modem import MetadataError
from node_agent.skew import emulated_shift

WATCH = b'?WATCH={"enable":true,"json":true}\n'
#: gpsd's TPV ``mode``: 0 unknown, 1 no fix, 2 2D, 3 3D.
FIX_MODES = {0: "unknown", 1: "none", 2: "2d", 3: "3d"}


@dataclass(frozen=True)
class GpsSample:
    time: datetime
    lat: float | None
    lon: float | None
    alt: float | None  # metres above mean sea level
    speed: float | None  # m/s
    fix: str  # unknown / none / 2d / 3d

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["time"] = self.time.isoformat()
        return doc


class GpsReader(Protocol):
    def read(self) -> GpsSample | None:
        """The current position; None when the receiver has none to give."""
        ...


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def parse_tpv(report: Mapping[str, Any], *, received: datetime) -> GpsSample | None:
    """A gpsd report as a sample; None unless it is a TPV (pure). Without a fix the
    sample has no position; its time is the fix's, or ``received`` when it has none."""
    if report.get("class") != "TPV":
        return None
    mode = int(report.get("mode", 0) or 0)
    fix = FIX_MODES.get(mode, "unknown")
    when = received
    if isinstance(report.get("time"), str):
        with contextlib.suppress(ValueError):
            when = datetime.fromisoformat(report["time"].replace("Z", "+00:00"))
    has_fix = mode >= 2
    alt = _num(report.get("altMSL", report.get("alt"))) if mode >= 3 else None
    return GpsSample(
        time=when,
        lat=_num(report.get("lat")) if has_fix else None,
        lon=_num(report.get("lon")) if has_fix else None,
        alt=alt,
        speed=_num(report.get("speed")) if has_fix else None,
        fix=fix,
    )


def parse_gpsd_lines(data: bytes, *, received: datetime) -> GpsSample | None:
    """The last TPV report in a stream of gpsd JSON lines (pure)."""
    last = None
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            report = json.loads(line)
        except ValueError:
            continue  # a partial line at the end of a read
        if isinstance(report, dict):
            sample = parse_tpv(report, received=received)
            if sample is not None:
                last = sample
    return last


class GpsdReader:
    def __init__(self, host: str = "127.0.0.1", port: int = 2947,
                 timeout_s: float = 3.0) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s

    def read(self) -> GpsSample | None:
        """The first TPV report that carries the receiver's time; a fix without one
        (NMEA's GGA has no date: gpsd's first TPV of a cycle may lack it) is kept and
        returned, stamped on arrival, only if no timed report comes before the
        timeout."""
        where = f"gpsd at {self.host}:{self.port}"
        deadline = time.monotonic() + self.timeout_s
        untimed: GpsSample | None = None
        try:
            with socket.create_connection((self.host, self.port), timeout=self.timeout_s) as s:
                s.sendall(WATCH)
                buf = b""
                while time.monotonic() < deadline:
                    s.settimeout(max(0.05, deadline - time.monotonic()))
                    chunk = s.recv(65536)
                    if not chunk:
                        raise MetadataError(f"{where} closed the connection before a TPV")
                    buf += chunk
                    complete, _, buf_tail = buf.rpartition(b"\n")
                    received = datetime.now(UTC)
                    sample = parse_gpsd_lines(complete, received=received)
                    if sample is not None and (sample.time != received or sample.lat is None):
                        return sample
                    untimed = sample or untimed
                    buf = buf_tail
        except TimeoutError as e:
            if untimed is not None:
                return untimed
            raise MetadataError(f"{where} sent no TPV report in {self.timeout_s:.0f} s") from e
        except OSError as e:
            raise MetadataError(f"cannot reach {where}: {e}") from e
        if untimed is not None:
            return untimed
        raise MetadataError(f"{where} sent no TPV report in {self.timeout_s:.0f} s")


def parse_linkem_position(doc: Mapping[str, Any]) -> GpsSample | None:
    """The position in a linkem state document (pure); None for a fixed node (no
    ``route:`` in its profile). The emulated receiver always has a 2D fix."""
    pos = doc.get("position")
    ms = doc.get("time_unix_ms")
    if not isinstance(pos, Mapping) or not isinstance(ms, int | float):
        return None
    lat, lon = _num(pos.get("lat")), _num(pos.get("lon"))
    if lat is None or lon is None:
        raise MetadataError(f"linkem position without lat/lon: {dict(pos)!r}")
    return GpsSample(time=datetime.fromtimestamp(ms / 1000, UTC), lat=lat, lon=lon,
                     alt=None, speed=_num(pos.get("speed_mps")), fix="2d")


class LinkemGpsReader:
    """The emulated GPS: the position linkem publishes for a moving node."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        #: linkem runs on the true clock: its times onto an emulated wrong one.
        self._skew = emulated_shift(os.environ)

    def read(self) -> GpsSample | None:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None  # the link is not up yet
        except (OSError, ValueError) as e:
            raise MetadataError(f"cannot read linkem state {self.path}: {e}") from e
        if not isinstance(doc, dict):
            raise MetadataError(f"linkem state {self.path} is not a JSON object")
        sample = parse_linkem_position(doc)
        if sample is None or not self._skew:
            return sample
        return replace(sample, time=sample.time + self._skew)
